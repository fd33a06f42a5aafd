#include "common/command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, command_test_count, 3, "How many widgets to make.");
ABSL_FLAG(bool, command_test_dry_run, false, "Make nothing (tests only).");

namespace kvcanary {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// What a command saw when it ran.
struct Ran {
  int times = 0;
  int count = 0;
  std::vector<std::string> positional;
};

Command Make(int order, Ran* ran, int exit_code = 0) {
  return {order,
          {"make",
           "Makes widgets.",
           {"command_test_count"},
           {"dir"},
           {"command_test_dry_run"}},
          [ran, exit_code](const CliParse& parse) {
            ++ran->times;
            ran->count = absl::GetFlag(FLAGS_command_test_count);
            ran->positional = parse.positional;
            return exit_code;
          }};
}

Command Named(int order, const std::string& name) {
  return {order, {name, "Does " + name + ".", {}, {}}, [](const CliParse&) {
            return 0;
          }};
}

std::vector<std::string> Names(const CliSpec& spec) {
  std::vector<std::string> names;
  for (const Subcommand& s : spec.subcommands) names.push_back(s.name);
  return names;
}

// RunCommandLine on `args` (after the program name), its stdout and stderr
// captured.
struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string ReadBack(FILE* f) {
  std::string text;
  std::rewind(f);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

Outcome RunLine(const CommandRegistry& registry,
                std::vector<const char*> args) {
  args.insert(args.begin(), "widgetctl");
  FILE* out = std::tmpfile();
  FILE* err = std::tmpfile();
  Outcome o;
  o.exit_code =
      RunCommandLine(registry, "widgetctl", "Makes widgets.",
                     static_cast<int>(args.size()), args.data(), out, err);
  o.out = ReadBack(out);
  o.err = ReadBack(err);
  return o;
}

class CommandTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(CommandTest, SpecListsCommandsByOrderNotByRegistration) {
  CommandRegistry registry;
  registry.Add(Named(30, "paint"));
  registry.Add(Named(10, "make"));
  registry.Add(Named(20, "inspect"));
  const CliSpec spec = registry.Spec("widgetctl", "Makes widgets.");
  EXPECT_EQ(spec.program, "widgetctl");
  EXPECT_EQ(spec.summary, "Makes widgets.");
  EXPECT_THAT(Names(spec), ElementsAre("make", "inspect", "paint"));
  const std::string help = CliHelp(spec, "");
  EXPECT_LT(help.find("  make "), help.find("  inspect "));
  EXPECT_LT(help.find("  inspect "), help.find("  paint "));
}

TEST_F(CommandTest, FindNamesACommandOrNothing) {
  CommandRegistry registry;
  registry.Add(Named(10, "make"));
  ASSERT_NE(registry.Find("make"), nullptr);
  EXPECT_EQ(registry.Find("make")->cli.summary, "Does make.");
  EXPECT_EQ(registry.Find("paint"), nullptr);
}

TEST_F(CommandTest, RegistrationAddsTheCommand) {
  CommandRegistry registry;
  const CommandRegistration registration(registry, Named(10, "make"));
  EXPECT_NE(registry.Find("make"), nullptr);
}

TEST_F(CommandTest, RunsTheNamedCommandWithItsFlagsAndArguments) {
  CommandRegistry registry;
  Ran ran;
  registry.Add(Make(10, &ran, /*exit_code=*/3));
  registry.Add(Named(20, "inspect"));
  const Outcome o =
      RunLine(registry, {"make", "--command-test-count=7", "widgets/"});
  EXPECT_EQ(o.exit_code, 3);  // the command's own
  EXPECT_EQ(ran.times, 1);
  EXPECT_EQ(ran.count, 7);
  EXPECT_THAT(ran.positional, ElementsAre("widgets/"));
  EXPECT_THAT(o.out, IsEmpty());
  EXPECT_THAT(o.err, IsEmpty());
}

TEST_F(CommandTest, HiddenFlagIsAcceptedButNotListed) {
  CommandRegistry registry;
  Ran ran;
  registry.Add(Make(10, &ran));
  EXPECT_EQ(RunLine(registry, {"make", "--command-test-dry-run"}).exit_code, 0);
  EXPECT_EQ(ran.times, 1);
  const Outcome help = RunLine(registry, {"make", "--help"});
  EXPECT_THAT(help.out, HasSubstr("--command-test-count=3"));
  EXPECT_THAT(help.out, Not(HasSubstr("dry")));
}

TEST_F(CommandTest, RefusedCommandLineExitsTwoNamingWhyAndRunsNothing) {
  CommandRegistry registry;
  Ran ran;
  registry.Add(Make(10, &ran));
  registry.Add(Named(20, "inspect"));
  Outcome o = RunLine(registry, {"make", "--bogus"});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err,
            "widgetctl: unknown flag --bogus for 'make' (see widgetctl make "
            "--help)\n");
  o = RunLine(registry, {"inspect", "--command-test-count=2"});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("--command-test-count does not apply to "
                               "'inspect' (it is a flag of make;"));
  o = RunLine(registry, {"make", "--command-test-count=many"});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("bad value for --command-test-count"));
  o = RunLine(registry, {"paint"});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.err, HasSubstr("unknown subcommand 'paint'"));
  EXPECT_EQ(ran.times, 0);
  EXPECT_THAT(o.out, IsEmpty());
}

TEST_F(CommandTest, HelpGoesToStdoutAndNoArgumentsToStderrWithExitTwo) {
  CommandRegistry registry;
  Ran ran;
  registry.Add(Make(10, &ran));
  Outcome o = RunLine(registry, {"--help"});
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_THAT(o.out, StartsWith("usage: widgetctl <subcommand> [flags]"));
  EXPECT_THAT(o.out, HasSubstr("  make  Makes widgets.\n"));
  o = RunLine(registry, {"make", "-h"});
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_THAT(o.out, StartsWith("usage: widgetctl make [flags] <dir>"));
  o = RunLine(registry, {});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_THAT(o.out, IsEmpty());
  EXPECT_THAT(o.err, StartsWith("usage: widgetctl <subcommand> [flags]"));
  EXPECT_EQ(ran.times, 0);
}

TEST(CommandDeathTest, ANameOrOrderTakenTwiceIsAProgrammingError) {
  CommandRegistry registry;
  registry.Add(Named(10, "make"));
  EXPECT_DEATH(registry.Add(Named(20, "make")), "registered twice");
  EXPECT_DEATH(registry.Add(Named(10, "paint")), "share order 10");
  EXPECT_DEATH(registry.Add({30, {"paint", "", {}, {}}, nullptr}),
               "has no run");
}

}  // namespace
}  // namespace kvcanary
