// kvcanary-engine's subcommands as registered by engine/app/cli/ (linked
// into this test as into the binary).
#include "engine/app/cli/commands.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/command_checks.h"

namespace kvcanary::engine::cli {
namespace {

using ::kvcanary::testing::CommandNames;
using ::testing::ElementsAre;

TEST(EngineCommandsTest, EverySubcommandIsRegisteredInHelpOrder) {
  EXPECT_THAT(
      CommandNames(EngineCommands()),
      ElementsAre("generate", "demo", "up", "serve", "faults", "write-model"));
}

TEST(EngineCommandsTest, FlagsNamedAreDeclaredAndFlagsDeclaredAreRead) {
  testing::ExpectFlagsDeclaredAndUsed(EngineCommands(), "engine/app/cli/");
}

TEST(EngineCommandsTest, HelpListsEveryCommand) {
  testing::ExpectHelpListsEveryCommand(EngineCommands(), kProgram, kSummary);
}

}  // namespace
}  // namespace kvcanary::engine::cli
