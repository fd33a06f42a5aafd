// The canonical encoding and the hash chain of evidence rows
// (docs/evidence-store.md), shared by Append and Verify: what a record must
// be to be appended, the canonical text of a row, and the SHA-256 that links
// it to the row before. Internal to storage/evidence_store.h.
#ifndef KVCANARY_STORAGE_EVIDENCE_ENCODING_H_
#define KVCANARY_STORAGE_EVIDENCE_ENCODING_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"

namespace kvcanary::storage::evidence_internal {

// prev_hash of row 1: 64 '0's.
const std::string& ZeroHash();

// Whether `kind` is a record kind: non-empty, [a-z_]+.
bool IsKind(absl::string_view kind);

// Whether `hex` is a row hash as stored: 64 lower-case hex characters.
bool IsHashHex(absl::string_view hex);

// body.dump(): compact, keys sorted. nlohmann throws on a string that is not
// UTF-8; that becomes kInvalidArgument here.
absl::StatusOr<std::string> DumpBody(const nlohmann::json& body);

// Why `r` cannot be appended, or its canonical body text.
absl::StatusOr<std::string> ValidateRecord(const EvidenceRecord& r);

// The canonical text of a row (EvidenceStore::CanonicalEncoding) from its
// fields, the body as its canonical text.
std::string CanonicalText(int64_t seq, absl::string_view kind,
                          absl::string_view campaign, int64_t ts_us,
                          absl::string_view body_text);

// Lower-case hex SHA-256 of prev_hash + "\n" + canonical_text.
std::string HashOf(absl::string_view prev_hash,
                   absl::string_view canonical_text);

}  // namespace kvcanary::storage::evidence_internal

#endif  // KVCANARY_STORAGE_EVIDENCE_ENCODING_H_
