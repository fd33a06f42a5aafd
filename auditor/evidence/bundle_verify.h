// `kvcanary-auditor verify-bundle DIR --pubkey P`: checks an export bundle
// (auditor/evidence/bundle.h) offline, with no database and only the public key
// the reviewer got out of band. What it checks and what that proves:
// docs/bundles.md.
#ifndef KVCANARY_AUDITOR_EVIDENCE_BUNDLE_VERIFY_H_
#define KVCANARY_AUDITOR_EVIDENCE_BUNDLE_VERIFY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "auditor/evidence/bundle_format.h"
#include "storage/ed25519_key.h"

namespace kvcanary::auditor {

// One thing wrong with a bundle.
struct BundleProblem {
  std::string file;   // the bundle file at fault, relative to the bundle
  std::string where;  // a JSON pointer, "line N (seq S)", "byte N"; or ""
  std::string what;   // for people

  std::string Line() const;  // "file at where: what"
};

struct BundleVerifyReport {
  bool ok = false;
  bool signature_ok = false;  // manifest.sig verified with the key
  BundleHeader header;        // as signed (when signature_ok)
  int64_t campaigns = 0;      // campaign documents checked
  int64_t rows = 0;           // rows whose inclusion proofs verified
  int64_t files = 0;          // files in the bundle directory
  // In check order: links and special files (never followed or opened),
  // manifest.sig, manifest.json, each listed file's SHA-256, unlisted files
  // and directories, the checkpoint, rows and proofs, campaign and facts
  // documents. Each names the entry's own path in the bundle. A single edited
  // byte is reported first at the file it landed in.
  std::vector<BundleProblem> problems;
};

// Checks the bundle in `dir` with `key` (a public key suffices). A bundle
// that fails is an OK status with ok false; errors only when `dir` cannot
// be read at all (kNotFound naming it).
absl::StatusOr<BundleVerifyReport> CheckBundle(const std::string& dir,
                                               const storage::Ed25519Key& key);

// The command: 0 verified, 1 verification failed (each problem printed,
// naming the file and field), 2 error (no directory, no key).
int VerifyBundle(const std::string& dir, const std::string& pubkey_path);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_BUNDLE_VERIFY_H_
