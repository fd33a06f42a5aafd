// kvcanary-auditor's subcommands: one file each in auditor/cli/, owning the
// flags only it reads (shared_flags.h holds those several read), and
// registering itself here with a static CommandRegistration
// (common/command.h). auditor_main.cc runs the one the command line names.
//
// The `order` keys, which set --help's listing: probe 10, sidecar 20,
// accept 30, facts 40, cache-audit 50, forensics 60 (the audits), then the
// evidence log's verify 70, keygen 80, checkpoint 90, export 100,
// verify-bundle 110, prove 120, findings 130.
#ifndef KVCANARY_AUDITOR_CLI_COMMANDS_H_
#define KVCANARY_AUDITOR_CLI_COMMANDS_H_

#include "common/command.h"

namespace kvcanary::auditor::cli {

inline constexpr char kProgram[] = "kvcanary-auditor";
inline constexpr char kSummary[] =
    "Acts as several tenants against an OpenAI-compatible endpoint, hunts "
    "cross-tenant contamination, and keeps the evidence in a hash-chained "
    "SQLite file (docs/auditor.md). Exit: 0 clean, 1 findings, 2 error, 3 "
    "inconclusive.";

// The registry every file of auditor/cli/ adds its command to.
CommandRegistry& AuditorCommands();

}  // namespace kvcanary::auditor::cli

#endif  // KVCANARY_AUDITOR_CLI_COMMANDS_H_
