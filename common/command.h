// The subcommands of a binary as a registry: each subcommand is a Command in
// a file of its own (its flags declared beside it), registered there by a
// static CommandRegistration, so the binary's main() is one call to
// RunCommandLine and adding a subcommand edits no other file.
//
// The registry derives the CliSpec that ParseCli and CliHelp read
// (common/cli.h), in the order the commands' `order` keys give.
//
// Static registration needs the registering object file to be linked in:
// compile command files into the executable (or an OBJECT library), never
// into a static archive, whose unreferenced members the linker drops.
#ifndef KVCANARY_COMMON_COMMAND_H_
#define KVCANARY_COMMON_COMMAND_H_

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/cli.h"

namespace kvcanary {

struct Command {
  // Where it comes in the program's --help listing: ascending, unique
  // within a registry (a gap between keys leaves room for new commands).
  int order = 0;
  // Its name, one-sentence summary, the flags it reads (as declared,
  // "max_probes"), its positional arguments and its hidden flags.
  Subcommand cli;
  // Runs it once ParseCli has stored its flags; `parse` holds its
  // positional arguments. Returns the process's exit code.
  std::function<int(const CliParse& parse)> run;
};

// The commands of one binary.
//
// Not thread-safe: commands are added during static initialisation (or by a
// test before it reads), and read from main() afterwards.
class CommandRegistry {
 public:
  // Crashes if a command of that name or order is there already, or if
  // `command` has no name or no run function (programming errors).
  void Add(Command command);

  // The command named `name`; nullptr if none is.
  const Command* Find(absl::string_view name) const;

  // Every command, in `order`.
  const std::vector<Command>& commands() const { return commands_; }

  // The spec ParseCli and CliHelp read: `program`, `summary` and every
  // command's Subcommand, in `order`.
  CliSpec Spec(absl::string_view program, absl::string_view summary) const;

 private:
  std::vector<Command> commands_;  // sorted by order
};

// Adds a command to a registry when constructed: one namespace-scope
// object per command file,
//   const CommandRegistration kProbe(AuditorCommands(), {10, {...}, Run});
struct CommandRegistration {
  CommandRegistration(CommandRegistry& registry, Command command) {
    registry.Add(std::move(command));
  }
};

// The whole of a main() with subcommands: no arguments prints the program's
// help on `err` and returns 2; a command line ParseCli refuses prints
// "<program>: <why>" on `err` and returns 2; --help prints the asked-for
// help on `out` and returns 0; anything else returns what the command's
// run returns.
int RunCommandLine(const CommandRegistry& registry, absl::string_view program,
                   absl::string_view summary, int argc, const char* const* argv,
                   FILE* out = stdout, FILE* err = stderr);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_COMMAND_H_
