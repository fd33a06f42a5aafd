// The files of an export bundle (docs/bundles.md) and how each encodes and
// decodes itself. Shared by the exporter (auditor/evidence/bundle.h) and the
// offline verifier (auditor/evidence/bundle_verify.h): every derived file —
// campaigns/*.json, facts/*.json, manifest.json — is a pure function of the
// cited rows or of the other files, so the verifier rebuilds it byte for byte
// and, where an edit landed, names the JSON field.
//
//   manifest.sig            C2SP signed note over BundleHeader::EncodeText
//   manifest.json           header fields + every other file's SHA-256/size
//   checkpoint              C2SP tlog-checkpoint of the whole log, signed
//   rows/rows.jsonl         every cited row as stored (EncodeRowLine)
//   proofs/inclusion.jsonl  one RFC 6962 inclusion proof per row (ProofLine)
//   campaigns/<id>.json     CampaignDocument of the campaign's rows
//   facts/<id>.json         FactsDocument, for facts campaigns with a table
//   anything else           extra files (OSCAL, answer sheets), listed
#ifndef KVCANARY_AUDITOR_EVIDENCE_BUNDLE_FORMAT_H_
#define KVCANARY_AUDITOR_EVIDENCE_BUNDLE_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"
#include "storage/merkle.h"

namespace kvcanary::auditor {

inline constexpr char kBundleFormat[] = "kvcanary-bundle-v1";
inline constexpr char kManifestFile[] = "manifest.json";
inline constexpr char kManifestSigFile[] = "manifest.sig";
inline constexpr char kCheckpointFile[] = "checkpoint";
inline constexpr char kRowsFile[] = "rows/rows.jsonl";
inline constexpr char kProofsFile[] = "proofs/inclusion.jsonl";

// "2026-12-03T10:15:00Z" (any RFC 3339 time, fractions and offsets
// included) as Unix microseconds. kInvalidArgument naming the text.
absl::StatusOr<int64_t> ParseRfc3339Us(const std::string& text);

// What manifest.sig signs: the bundle's identity and the manifest's hash.
//   kvcanary-bundle-v1
//   origin <origin>
//   window <since_us> <until_us>
//   exported <exported_us>
//   checkpoint <tree_size> <root hex>
//   manifest.json <sha256 hex>
struct BundleHeader {
  std::string origin;
  int64_t since_us = 0, until_us = 0, exported_us = 0;
  uint64_t tree_size = 0;
  storage::MerkleHash root{};
  std::string manifest_sha256;  // 64 lower-case hex chars

  std::string EncodeText() const;
  // kInvalidArgument naming the line that is not as above.
  static absl::StatusOr<BundleHeader> DecodeText(absl::string_view text);
};

// One file as the manifest lists it.
struct BundleFile {
  std::string path;  // relative, '/'-separated
  std::string sha256;
  uint64_t size_bytes = 0;
};
BundleFile DescribeFile(const std::string& path, absl::string_view bytes);

// manifest.json: the header (without its manifest hash) and `files`,
// sorted by path. A pure function of its arguments.
std::string EncodeManifest(const BundleHeader& h,
                           std::vector<BundleFile> files);

// How every JSON file of a bundle is written: 2-space indent, sorted keys,
// a final newline.
std::string JsonFileBytes(const nlohmann::json& j);

// A row of rows/rows.jsonl: {"body":<stored text>,"campaign","kind","seq",
// "ts_us"}, compact, one line (no newline).
std::string EncodeRowLine(const storage::StoredRow& r);
absl::StatusOr<storage::StoredRow> DecodeRowLine(absl::string_view line);

// A line of proofs/inclusion.jsonl.
struct ProofLine {
  int64_t seq = 0;
  uint64_t leaf_index = 0;
  uint64_t tree_size = 0;
  std::vector<storage::MerkleHash> proof;  // hex in the file

  std::string Encode() const;  // compact, one line
  static absl::StatusOr<ProofLine> Decode(absl::string_view line);
};

// campaigns/<id>.json or facts/<id>.json: the id itself when it is a safe
// file name ([A-Za-z0-9._-], not starting with '.'), else a hash of it.
std::string CampaignPath(const std::string& campaign);
std::string FactsPath(const std::string& campaign);

// The campaign as its rows (in seq order, all of one campaign) record it:
// command, target, tenants, plan (the campaign_start body), verdict,
// exit_code, reasons, detectors with coverage (campaign_end), incidents
// (incident rows), counts per kind and cited_rows (every seq). A campaign
// with no campaign_end row has verdict "unfinished".
nlohmann::json CampaignDocument(const std::string& campaign,
                                const std::vector<storage::StoredRow>& rows);
// The provider facts of a facts campaign: its facts_table body and the
// seqs of its facts_* rows; null when it recorded no facts_table.
nlohmann::json FactsDocument(const std::string& campaign,
                             const std::vector<storage::StoredRow>& rows);

// The first JSON pointer at which `got` differs from `want` ("" for the
// root; "/a/0/b"): where an edit landed.
std::string FirstDifference(const nlohmann::json& want,
                            const nlohmann::json& got);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_BUNDLE_FORMAT_H_
