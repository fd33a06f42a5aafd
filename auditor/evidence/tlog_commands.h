// The verifiable-log commands of kvcanary-auditor (keygen, checkpoint,
// prove, verify against checkpoints) as plain functions: options in, a
// short report on stdout (errors on stderr), an exit code out:
//   0 ok, 1 verification failed, 2 error (could not run).
// The log itself: storage/evidence_tlog.h. Flags live in auditor_main.cc.
#ifndef KVCANARY_AUDITOR_EVIDENCE_TLOG_COMMANDS_H_
#define KVCANARY_AUDITOR_EVIDENCE_TLOG_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/evidence_store.h"

namespace kvcanary::auditor {

inline constexpr int kTlogOk = 0;
inline constexpr int kTlogFailed = 1;
inline constexpr int kTlogError = 2;

// "kvcanary/<hostname>": the default checkpoint origin and key name.
std::string DefaultOrigin();

struct KeygenOptions {
  std::string out;  // private key path; the public key goes to out + ".pub"
  bool overwrite = false;  // refuse to replace an existing key unless set
};
// Writes a new Ed25519 key pair: `out` (PKCS#8 PEM, mode 0600) and
// `out`.pub (SPKI PEM), the forms `openssl genpkey -algorithm ed25519` and
// `openssl pkey -pubout` write. Prints both paths and the key id.
int Keygen(const KeygenOptions& o);

struct CheckpointOptions {
  std::string db;
  std::string key;     // PEM private key
  std::string origin;  // empty: DefaultOrigin()
  // Each gets checkpoint-<size> and leaves.bin (storage/evidence_tlog.h);
  // e.g. the --checkpoint-dir and a second, off-host one.
  std::vector<std::string> dirs;
};
// Signs a checkpoint of the whole log into every directory. Exit 1 if the
// log's chain is broken or it diverges from an earlier checkpoint there.
int Checkpoint(const CheckpointOptions& o);

struct ProveOptions {
  std::string db;
  // Inclusion: row > 0 (seq), in the tree of tree_size rows (0: all).
  int64_t row = 0;
  uint64_t tree_size = 0;
  // Consistency (when row == 0): from_size -> to_size (0: all rows).
  uint64_t from_size = 0;
  uint64_t to_size = 0;
};
// Prints the proof as JSON (hex hashes), verified before printing.
int Prove(const ProveOptions& o);

struct VerifyCheckpointOptions {
  std::string db;
  std::string checkpoint;  // a checkpoint file or a directory of them
  std::string pubkey;      // PEM public (or private) key
};
// Hash chain plus every checkpoint; names the first diverging row and the
// rows missing; lists interrupted campaigns. Exit 1 on any failure.
int VerifyWithCheckpoints(const VerifyCheckpointOptions& o);

// Lines naming each campaign started and never ended, "campaign X:
// interrupted (no end recorded, no writer holds the database)", or
// "... no end recorded yet (a writer holds the database)": for verify and
// findings. Opens the database read-only.
absl::StatusOr<std::vector<std::string>> UnfinishedCampaignLines(
    const std::string& db);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_TLOG_COMMANDS_H_
