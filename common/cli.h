// A subcommand-aware command line over Abseil flags: `program <subcommand>
// [flags] [args]`, where each subcommand accepts only its own flags, values
// are parsed by each flag's own parser, and `--help` lists one subcommand's
// flags with their help and default.
//
// Abseil 20220623 has no hook for unknown flags and exits(1) on a bad one, so
// binaries with subcommands parse argv here instead of with
// absl::ParseCommandLine; flags are still declared with ABSL_FLAG in the
// *_main.cc file and read with absl::GetFlag.
#ifndef KVCANARY_COMMON_CLI_H_
#define KVCANARY_COMMON_CLI_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary {

struct Subcommand {
  std::string name;     // "probe", "write-model"
  std::string summary;  // one sentence, for the program's help
  // Names of the flags it reads, as declared (underscores: "max_probes").
  // Every name must be an ABSL_FLAG linked into the binary.
  std::vector<std::string> flags;
  // Names of the positional arguments it takes, for the usage line ("dir");
  // more than this many are refused, fewer are the caller's to check.
  std::vector<std::string> args;
  // Flags it accepts but does not list in its help (testing switches).
  std::vector<std::string> hidden_flags = {};
};

struct CliSpec {
  std::string program;  // "kvcanary-engine"
  std::string summary;  // one sentence
  std::vector<Subcommand> subcommands;
};

struct CliParse {
  std::string subcommand;  // empty only with help: the program's help
  std::vector<std::string> positional;
  bool help = false;  // --help, -h or --helpfull was given: print CliHelp
};

// Parses argv: argv[1] is the subcommand; after it, every "--name=value",
// "--name value", "-name[=value]", "--name" / "--noname" (booleans) must name
// a flag of that subcommand ("--max-probes" == "--max_probes"), and its value
// is parsed by the flag's own parser and stored in the flag. Other words are
// positional; "--" ends the flags. "--help", "-h" or "--helpfull" anywhere
// before "--" returns help = true without checking anything else. A flag
// given twice: the last wins.
//
// Returns kInvalidArgument, with a message naming the flag or word and the
// subcommand, for: no subcommand, an unknown subcommand, a flag before the
// subcommand, an unknown flag, a flag of another subcommand, a missing or
// unparsable value, or too many positional arguments. Flags parsed before
// the error keep their new values.
//
// Not thread-safe: call from main() before other threads start. Crashes if
// `spec` names a flag that is not linked in (a programming error).
absl::StatusOr<CliParse> ParseCli(const CliSpec& spec, int argc,
                                  const char* const* argv);

// The help text, wrapped at 80 columns. For subcommand "": the usage line,
// the program's summary and every subcommand with its summary. For a
// subcommand: its usage line, summary, and each of its flags as
// "--name=<default>  help", names with dashes ("--max-probes").
// REQUIRES: `subcommand` is "" or one of spec.subcommands.
std::string CliHelp(const CliSpec& spec, absl::string_view subcommand);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_CLI_H_
