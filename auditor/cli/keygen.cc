// kvcanary-auditor keygen: an Ed25519 key pair for signing checkpoints.
#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/tlog_commands.h"

ABSL_FLAG(bool, force, false, "keygen: replace an existing key pair.");

namespace kvcanary::auditor::cli {
namespace {

int RunKeygen(const CliParse&) {
  return Keygen({absl::GetFlag(FLAGS_out), absl::GetFlag(FLAGS_force)});
}

const CommandRegistration kKeygen(
    AuditorCommands(), {80,
                        {"keygen",
                         "Writes an Ed25519 key pair for signing checkpoints.",
                         {"out", "force"},
                         {}},
                        RunKeygen});

}  // namespace
}  // namespace kvcanary::auditor::cli
