// Checks of a binary's command registry (common/command.h), shared by the
// tests of kvcanary-auditor's and kvcanary-engine's subcommands: the flags
// each command names are linked in, every flag declared in the commands'
// folder is one a command reads, and the help lists every command.
#ifndef KVCANARY_TESTS_COMMAND_CHECKS_H_
#define KVCANARY_TESTS_COMMAND_CHECKS_H_

#include <set>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "common/cli.h"
#include "common/command.h"
#include "gtest/gtest.h"

namespace kvcanary::testing {

inline std::vector<std::string> CommandNames(const CommandRegistry& registry) {
  std::vector<std::string> names;
  for (const Command& c : registry.commands()) names.push_back(c.cli.name);
  return names;
}

// Every flag a command of `registry` names, listed or hidden, is an
// ABSL_FLAG linked in; every ABSL_FLAG declared in a file whose path holds
// `folder` ("auditor/cli/") is named by some command.
inline void ExpectFlagsDeclaredAndUsed(const CommandRegistry& registry,
                                       const std::string& folder) {
  std::set<std::string> named;
  for (const Command& c : registry.commands()) {
    for (const auto* list : {&c.cli.flags, &c.cli.hidden_flags}) {
      for (const std::string& f : *list) {
        named.insert(f);
        EXPECT_NE(absl::FindCommandLineFlag(f), nullptr)
            << c.cli.name << " names --" << f << ", which is not declared";
      }
    }
  }
  int declared = 0;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->Filename().find(folder) == std::string::npos) continue;
    ++declared;
    EXPECT_TRUE(named.count(std::string(name)) > 0)
        << "--" << name << " (" << flag->Filename()
        << ") is read by no command";
  }
  EXPECT_GT(declared, 0) << "no flag declared under " << folder;
}

// The program's help lists every command with its summary's first word,
// and each command's help starts with its usage line.
inline void ExpectHelpListsEveryCommand(const CommandRegistry& registry,
                                        const std::string& program,
                                        const std::string& summary) {
  const CliSpec spec = registry.Spec(program, summary);
  const std::string help = CliHelp(spec, "");
  size_t last = 0;
  for (const Command& c : registry.commands()) {
    const size_t at = help.find("\n  " + c.cli.name + " ");
    ASSERT_NE(at, std::string::npos) << c.cli.name << " missing:\n" << help;
    EXPECT_GT(at, last) << c.cli.name << " out of order:\n" << help;
    last = at;
    EXPECT_EQ(CliHelp(spec, c.cli.name)
                  .rfind("usage: " + program + " " + c.cli.name, 0),
              0u)
        << c.cli.name;
  }
}

}  // namespace kvcanary::testing

#endif  // KVCANARY_TESTS_COMMAND_CHECKS_H_
