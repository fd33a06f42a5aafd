// kvcanary-auditor's subcommands as registered by auditor/cli/ (linked into
// this test as into the binary).
#include "auditor/cli/commands.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/command_checks.h"

namespace kvcanary::auditor::cli {
namespace {

using ::kvcanary::testing::CommandNames;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

TEST(AuditorCommandsTest, EverySubcommandIsRegisteredInHelpOrder) {
  EXPECT_THAT(CommandNames(AuditorCommands()),
              ElementsAre("probe", "sidecar", "accept", "facts", "cache-audit",
                          "forensics", "verify", "keygen", "checkpoint",
                          "export", "verify-bundle", "prove", "findings"));
}

TEST(AuditorCommandsTest, FlagsNamedAreDeclaredAndFlagsDeclaredAreRead) {
  testing::ExpectFlagsDeclaredAndUsed(AuditorCommands(), "auditor/cli/");
}

TEST(AuditorCommandsTest, HelpListsEveryCommand) {
  testing::ExpectHelpListsEveryCommand(AuditorCommands(), kProgram, kSummary);
}

TEST(AuditorCommandsTest, OnlyTheCampaignsTakeTheHiddenTestBreak) {
  for (const Command& c : AuditorCommands().commands()) {
    if (c.cli.name == "probe" || c.cli.name == "sidecar") {
      EXPECT_THAT(c.cli.hidden_flags, ElementsAre("test_break"));
    } else {
      EXPECT_THAT(c.cli.hidden_flags, IsEmpty()) << c.cli.name;
    }
  }
  EXPECT_THAT(AuditorCommands().Find("verify-bundle")->cli.args,
              UnorderedElementsAre("dir"));
}

}  // namespace
}  // namespace kvcanary::auditor::cli
