// kvcanary-auditor verify: the evidence database's hash chain and, with
// --checkpoint, its signed Merkle log (docs/evidence-store.md).
#include <string>

#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/commands.h"

ABSL_FLAG(std::string, checkpoint, "",
          "verify: a checkpoint file, or a directory of them, to verify the "
          "log against (with --pubkey).");

namespace kvcanary::auditor::cli {
namespace {

int RunVerify(const CliParse&) {
  return VerifyCommand({absl::GetFlag(FLAGS_db),
                        absl::GetFlag(FLAGS_checkpoint),
                        absl::GetFlag(FLAGS_pubkey)});
}

const CommandRegistration kVerify(
    AuditorCommands(),
    {70,
     {"verify",
      "Checks the evidence database's hash chain, and with --checkpoint its "
      "signed Merkle log: names the first bad or diverging row and the rows "
      "missing.",
      {"db", "checkpoint", "pubkey"},
      {}},
     RunVerify});

}  // namespace
}  // namespace kvcanary::auditor::cli
