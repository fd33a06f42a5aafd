// The canonical encoding and the hash chain of evidence rows
// (storage/evidence_encoding.h), and EvidenceStore's and StoredRow's public
// faces of it.
#include "storage/evidence_encoding.h"

#include <openssl/sha.h>

#include <cstdint>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/sha256.h"

namespace kvcanary::storage {
namespace evidence_internal {
namespace {

constexpr absl::string_view kEncodingPrefix = "kvcanary-evidence-v1\n";
constexpr size_t kHashHexChars = 2 * SHA256_DIGEST_LENGTH;  // 64

}  // namespace

const std::string& ZeroHash() {
  static const std::string* const zero = new std::string(kHashHexChars, '0');
  return *zero;
}

bool IsKind(absl::string_view kind) {
  if (kind.empty()) return false;
  for (const char c : kind) {
    if (!((c >= 'a' && c <= 'z') || c == '_')) return false;
  }
  return true;
}

bool IsHashHex(absl::string_view hex) {
  if (hex.size() != kHashHexChars) return false;
  for (const char c : hex) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<std::string> DumpBody(const nlohmann::json& body) {
  try {
    return body.dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("body cannot be encoded: ", e.what()));
  }
}

absl::StatusOr<std::string> ValidateRecord(const EvidenceRecord& r) {
  if (r.kind.empty()) return absl::InvalidArgumentError("empty kind");
  if (!IsKind(r.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kind '", absl::CEscape(r.kind), "' is not [a-z_]+"));
  }
  if (r.campaign.empty()) return absl::InvalidArgumentError("empty campaign");
  if (!r.body.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "body is a JSON ", r.body.type_name(), ", not a JSON object"));
  }
  return DumpBody(r.body);
}

std::string CanonicalText(int64_t seq, absl::string_view kind,
                          absl::string_view campaign, int64_t ts_us,
                          absl::string_view body_text) {
  return absl::StrCat(kEncodingPrefix, seq, "\n", kind, "\n", campaign, "\n",
                      ts_us, "\n", body_text);
}

std::string HashOf(absl::string_view prev_hash,
                   absl::string_view canonical_text) {
  return Sha256Hex(absl::StrCat(prev_hash, "\n", canonical_text));
}

}  // namespace evidence_internal

using evidence_internal::CanonicalText;
using evidence_internal::DumpBody;
using evidence_internal::HashOf;

std::string StoredRow::LeafData(int64_t at_seq) const {
  return CanonicalText(at_seq, kind, campaign, ts_us, body);
}

std::string EvidenceStore::CanonicalEncoding(int64_t seq,
                                             const EvidenceRecord& r) {
  absl::StatusOr<std::string> body = DumpBody(r.body);
  CHECK(body.ok()) << body.status();
  return CanonicalText(seq, r.kind, r.campaign, r.ts_us, *body);
}

std::string EvidenceStore::RowHash(const std::string& prev_hash, int64_t seq,
                                   const EvidenceRecord& r) {
  return HashOf(prev_hash, CanonicalEncoding(seq, r));
}

}  // namespace kvcanary::storage
