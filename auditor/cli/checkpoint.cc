// kvcanary-auditor checkpoint: a signed checkpoint of the evidence log
// (docs/evidence-store.md).
#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/tlog_commands.h"

namespace kvcanary::auditor::cli {
namespace {

int RunCheckpoint(const CliParse&) {
  if (absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    return Fail(absl::InvalidArgumentError("--checkpoint-dir is required"));
  }
  return Checkpoint({absl::GetFlag(FLAGS_db), absl::GetFlag(FLAGS_key),
                     absl::GetFlag(FLAGS_origin), CheckpointDirs()});
}

const CommandRegistration kCheckpoint(
    AuditorCommands(),
    {90,
     {"checkpoint",
      "Signs a C2SP checkpoint of the evidence log's RFC 6962 Merkle tree "
      "into --checkpoint-dir (and --checkpoint-mirror).",
      {"db", "key", "origin", "checkpoint_dir", "checkpoint_mirror"},
      {}},
     RunCheckpoint});

}  // namespace
}  // namespace kvcanary::auditor::cli
