// kvcanary-auditor verify-bundle: an export bundle checked offline
// (docs/bundles.md).
#include "absl/flags/flag.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/bundle_verify.h"

namespace kvcanary::auditor::cli {
namespace {

int RunVerifyBundle(const CliParse& parse) {
  if (parse.positional.size() != 1 || absl::GetFlag(FLAGS_pubkey).empty()) {
    return Fail(absl::InvalidArgumentError(
        "usage: kvcanary-auditor verify-bundle DIR --pubkey P"));
  }
  return VerifyBundle(parse.positional[0], absl::GetFlag(FLAGS_pubkey));
}

const CommandRegistration kVerifyBundle(
    AuditorCommands(),
    {110,
     {"verify-bundle",
      "Checks an export bundle offline, with no database: signatures, "
      "proofs, every cited row and every file.",
      {"pubkey"},
      {"dir"}},
     RunVerifyBundle});

}  // namespace
}  // namespace kvcanary::auditor::cli
