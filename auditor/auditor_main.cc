// kvcanary-auditor: probe | sidecar | accept | facts | cache-audit |
// forensics | verify | keygen | checkpoint | export | verify-bundle | prove |
// findings (docs/auditor.md). Each subcommand, with the flags only it
// reads, is a file of auditor/cli/ that registers itself
// (auditor/cli/commands.h); this runs the one the command line names.
#include "auditor/cli/commands.h"
#include "common/command.h"

int main(int argc, char** argv) {
  using kvcanary::auditor::cli::AuditorCommands;
  using kvcanary::auditor::cli::kProgram;
  using kvcanary::auditor::cli::kSummary;
  return kvcanary::RunCommandLine(AuditorCommands(), kProgram, kSummary, argc,
                                  argv);
}
