// `kvcanary-auditor export`: a self-contained bundle of the campaigns that
// started in a time window, for a reviewer with no access to the database.
// The layout and what it proves: docs/bundles.md; the files' encodings:
// auditor/evidence/bundle_format.h; the offline check:
// auditor/evidence/bundle_verify.h.
#ifndef KVCANARY_AUDITOR_EVIDENCE_BUNDLE_H_
#define KVCANARY_AUDITOR_EVIDENCE_BUNDLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auditor/evidence/bundle_format.h"
#include "nlohmann/json.hpp"
#include "storage/ed25519_key.h"
#include "storage/merkle.h"

namespace kvcanary::auditor {

// What the exporter read, for callers that derive more files from it (the
// OSCAL document, answer sheets).
struct BundleEvidence {
  // CampaignDocument of every campaign in the window, in start order.
  std::vector<nlohmann::json> campaigns;
  // FactsDocument of the facts campaigns that recorded a table.
  std::vector<nlohmann::json> facts;
  // Bundle paths of the documents above (campaigns/<id>.json, ...), in the
  // same order, for references into the bundle.
  std::vector<std::string> campaign_paths, facts_paths;
  int64_t since_us = 0, until_us = 0, exported_us = 0;
  // The signed checkpoint the bundle carries (file kCheckpointFile).
  std::string origin;
  uint64_t tree_size = 0;
  storage::MerkleHash root{};
};

struct ExportOptions {
  std::string db;
  int64_t since_us = 0;  // campaigns whose campaign_start ts is in
  int64_t until_us = 0;  // [since_us, until_us]; until 0: now
  std::string key;       // PEM private key (keygen)
  std::string origin;    // empty: DefaultOrigin()
  std::string out_dir;   // created; must not exist or be empty
  // Extra files written into the bundle and listed in the manifest: path
  // (relative, '/'-separated, not a reserved name) -> bytes.
  std::map<std::string, std::string> extra_files;
  // Called once the evidence is read, before anything is written; the
  // files it returns are added to extra_files. May be empty.
  std::function<absl::StatusOr<std::map<std::string, std::string>>(
      const BundleEvidence&)>
      make_extra_files;
};

struct ExportedBundle {
  BundleHeader header;
  BundleEvidence evidence;
  int64_t rows = 0;               // cited rows written
  std::vector<BundleFile> files;  // as the manifest lists them
};

// Writes the bundle. kDataLoss, and nothing written, if the log's hash
// chain is broken (the bundle must not vouch for a tampered log);
// kAlreadyExists for a non-empty out_dir; kInvalidArgument for a bad
// window, origin or extra file path. REQUIRES: key.has_private().
absl::StatusOr<ExportedBundle> WriteBundle(const ExportOptions& o,
                                           const storage::Ed25519Key& key);

// The command: reads the key, writes the bundle, prints a short summary.
// 0 ok, 1 the log failed verification (nothing written), 2 error.
int ExportBundle(const ExportOptions& o);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_BUNDLE_H_
