#include "common/cli.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, cli_test_count, 3, "How many widgets to make.");
ABSL_FLAG(double, cli_test_ratio, 0.5, "Share of widgets painted red.");
ABSL_FLAG(bool, cli_test_quiet, false, "Print nothing while working.");
ABSL_FLAG(std::string, cli_test_name, "", "Name written on every widget.");
ABSL_FLAG(uint32_t, cli_test_sample, 1, "Inspect every Nth widget.");
ABSL_FLAG(std::string, cli_test_db, "widgets.db",
          "Where the widgets are recorded: a SQLite file that is created if "
          "it does not exist yet, with a help sentence long enough to wrap.");

namespace kvcanary {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

CliSpec Spec() {
  return CliSpec{"widgetctl",
                 "Makes and inspects widgets.",
                 {Subcommand{"make",
                             "Makes widgets.",
                             {"cli_test_count", "cli_test_ratio",
                              "cli_test_quiet", "cli_test_name", "cli_test_db"},
                             {"dir"}},
                  Subcommand{"inspect",
                             "Inspects widgets.",
                             {"cli_test_sample", "cli_test_db"},
                             {}}}};
}

// Parses `args` (after the program name) against Spec().
absl::StatusOr<CliParse> Parse(std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {"widgetctl"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseCli(Spec(), static_cast<int>(argv.size()), argv.data());
}

std::string ErrorOf(std::initializer_list<const char*> args) {
  absl::StatusOr<CliParse> p = Parse(args);
  if (p.ok()) return "(parsed)";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

class CliTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(CliTest, SubcommandAndFlagsAreParsedIntoTheFlags) {
  absl::StatusOr<CliParse> p =
      Parse({"make", "--cli_test_count=7", "--cli_test_ratio=0.25"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->subcommand, "make");
  EXPECT_FALSE(p->help);
  EXPECT_THAT(p->positional, IsEmpty());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_ratio), 0.25);
}

TEST_F(CliTest, DashesAndUnderscoresNameTheSameFlag) {
  ASSERT_TRUE(Parse({"make", "--cli-test-count=8"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 8);
  ASSERT_TRUE(Parse({"make", "--cli_test-count=9"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 9);
  ASSERT_TRUE(Parse({"make", "-cli-test-count=10"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 10);
}

TEST_F(CliTest, ValueMayFollowAsTheNextWord) {
  ASSERT_TRUE(
      Parse({"make", "--cli-test-count", "11", "--cli-test-name", "-dashing-"})
          .ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 11);
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_name), "-dashing-");
  ASSERT_TRUE(Parse({"make", "--cli-test-count", "-4"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), -4);
}

TEST_F(CliTest, EmptyValueAfterEqualsIsAValue) {
  ASSERT_TRUE(Parse({"make", "--cli-test-name=x"}).ok());
  ASSERT_TRUE(Parse({"make", "--cli-test-name="}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_name), "");
}

TEST_F(CliTest, MissingValueIsRefusedNamingTheFlag) {
  EXPECT_THAT(ErrorOf({"make", "--cli-test-count"}),
              HasSubstr("missing value for --cli-test-count"));
  // A forgotten value is not silently taken from the next flag.
  EXPECT_THAT(ErrorOf({"make", "--cli-test-name", "--cli-test-quiet"}),
              HasSubstr("missing value for --cli-test-name before "
                        "--cli-test-quiet"));
}

TEST_F(CliTest, BooleanForms) {
  ASSERT_TRUE(Parse({"make", "--cli-test-quiet"}).ok());
  EXPECT_TRUE(absl::GetFlag(FLAGS_cli_test_quiet));
  ASSERT_TRUE(Parse({"make", "--cli-test-quiet=false"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_quiet));
  ASSERT_TRUE(Parse({"make", "--cli-test-quiet=true"}).ok());
  EXPECT_TRUE(absl::GetFlag(FLAGS_cli_test_quiet));
  ASSERT_TRUE(Parse({"make", "--nocli-test-quiet"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_quiet));
  ASSERT_TRUE(Parse({"make", "--nocli_test_quiet"}).ok());
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_quiet));
}

TEST_F(CliTest, BooleanFormsThatMakeNoSenseAreRefused) {
  EXPECT_THAT(ErrorOf({"make", "--cli-test-quiet=maybe"}),
              HasSubstr("bad value for --cli-test-quiet: 'maybe': want true "
                        "or false"));
  EXPECT_THAT(ErrorOf({"make", "--nocli-test-quiet=true"}),
              HasSubstr("--nocli-test-quiet takes no value"));
  EXPECT_THAT(ErrorOf({"make", "--nocli-test-count"}),
              HasSubstr("--cli-test-count is not a boolean flag"));
  // A boolean does not take the next word as its value.
  EXPECT_THAT(ErrorOf({"make", "--cli-test-quiet", "false", "dir"}),
              HasSubstr("unexpected argument 'dir' for 'make'"));
}

TEST_F(CliTest, LastOfARepeatedFlagWins) {
  ASSERT_TRUE(Parse({"make", "--cli-test-count=1", "--cli-test-count=2"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 2);
}

TEST_F(CliTest, UnknownFlagIsNamedWithTheSubcommand) {
  EXPECT_EQ(ErrorOf({"make", "--cli-test-cuont=3"}),
            "unknown flag --cli-test-cuont for 'make' (see widgetctl make "
            "--help)");
  EXPECT_THAT(ErrorOf({"make", "-x"}), HasSubstr("unknown flag -x"));
}

TEST_F(CliTest, FlagOfAnotherSubcommandIsRefusedNamingItsOwner) {
  EXPECT_EQ(ErrorOf({"inspect", "--cli-test-count=3"}),
            "--cli-test-count does not apply to 'inspect' (it is a flag of "
            "make; see widgetctl inspect --help)");
  // Flags linked in but in no subcommand are unknown, absl's own included.
  EXPECT_THAT(ErrorOf({"make", "--flagfile=x"}),
              HasSubstr("unknown flag --flagfile for 'make'"));
}

TEST_F(CliTest, BadValuesAreNamedWithTheWantedType) {
  EXPECT_EQ(ErrorOf({"make", "--cli-test-count=abc"}),
            "bad value for --cli-test-count: 'abc': want a 32-bit integer");
  EXPECT_THAT(ErrorOf({"make", "--cli-test-count", "-x"}),
              HasSubstr("bad value for --cli-test-count: '-x'"));
  EXPECT_THAT(ErrorOf({"make", "--cli-test-count=99999999999"}),
              HasSubstr("bad value for --cli-test-count"));
  EXPECT_EQ(ErrorOf({"make", "--cli-test-ratio=half"}),
            "bad value for --cli-test-ratio: 'half': want a number");
  EXPECT_EQ(ErrorOf({"inspect", "--cli-test-sample=-1"}),
            "bad value for --cli-test-sample: '-1': want a non-negative "
            "32-bit integer");
}

TEST_F(CliTest, RefusedValueLeavesTheFlagAsItWas) {
  ASSERT_FALSE(Parse({"make", "--cli-test-count=abc"}).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 3);
}

TEST_F(CliTest, PositionalArgumentsAreReturnedUpToTheirNumber) {
  absl::StatusOr<CliParse> p =
      Parse({"make", "--cli-test-count=2", "out", "--cli-test-quiet"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->positional, ElementsAre("out"));
  EXPECT_TRUE(absl::GetFlag(FLAGS_cli_test_quiet));
  EXPECT_THAT(ErrorOf({"make", "a", "b"}),
              HasSubstr("unexpected argument 'b' for 'make'"));
  EXPECT_THAT(ErrorOf({"inspect", "a"}),
              HasSubstr("unexpected argument 'a' for 'inspect'"));
  // "-" is a word, not a flag.
  p = Parse({"make", "-"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->positional, ElementsAre("-"));
}

TEST_F(CliTest, DoubleDashEndsTheFlags) {
  absl::StatusOr<CliParse> p =
      Parse({"make", "--cli-test-count=5", "--", "--cli-test-quiet"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->positional, ElementsAre("--cli-test-quiet"));
  EXPECT_FALSE(absl::GetFlag(FLAGS_cli_test_quiet));
  EXPECT_EQ(absl::GetFlag(FLAGS_cli_test_count), 5);
  // --help after "--" is a word too.
  p = Parse({"make", "--", "--help"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->help);
  EXPECT_THAT(p->positional, ElementsAre("--help"));
}

TEST_F(CliTest, MissingUnknownOrLateSubcommandIsRefused) {
  EXPECT_THAT(ErrorOf({}), HasSubstr("no subcommand given"));
  EXPECT_EQ(ErrorOf({"paint"}),
            "unknown subcommand 'paint' (see widgetctl --help)");
  EXPECT_THAT(ErrorOf({"--cli-test-count=2", "make"}),
              HasSubstr("--cli-test-count comes before the subcommand"));
}

TEST_F(CliTest, HelpAnywhereAsksForHelpWithoutCheckingTheRest) {
  for (const char* word : {"--help", "-h", "--helpfull", "-help"}) {
    absl::StatusOr<CliParse> p = Parse({"make", "--bogus", word});
    ASSERT_TRUE(p.ok()) << word << ": " << p.status();
    EXPECT_TRUE(p->help) << word;
    EXPECT_EQ(p->subcommand, "make") << word;
  }
  absl::StatusOr<CliParse> p = Parse({"--help"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->help);
  EXPECT_EQ(p->subcommand, "");
  p = Parse({"--help", "inspect"});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->subcommand, "inspect");
  p = Parse({"paint", "--help"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->help);
  EXPECT_EQ(p->subcommand, "");
}

TEST_F(CliTest, ProgramHelpListsSubcommandsWithSummaries) {
  const std::string help = CliHelp(Spec(), "");
  EXPECT_THAT(help, HasSubstr("usage: widgetctl <subcommand> [flags]"));
  EXPECT_THAT(help, HasSubstr("Makes and inspects widgets."));
  EXPECT_THAT(help, HasSubstr("  make     Makes widgets.\n"));
  EXPECT_THAT(help, HasSubstr("  inspect  Inspects widgets.\n"));
}

TEST_F(CliTest, SubcommandHelpListsItsFlagsWithHelpAndDefaultOnly) {
  const std::string help = CliHelp(Spec(), "make");
  EXPECT_THAT(help, HasSubstr("usage: widgetctl make [flags] <dir>"));
  EXPECT_THAT(help, HasSubstr("--cli-test-count=3"));
  EXPECT_THAT(help, HasSubstr("How many widgets to make."));
  EXPECT_THAT(help, HasSubstr("--cli-test-ratio=0.5"));
  EXPECT_THAT(help, HasSubstr("Share of widgets painted red."));
  EXPECT_THAT(help, HasSubstr("--cli-test-quiet=false"));
  EXPECT_THAT(help, HasSubstr("--cli-test-name=\"\""));
  EXPECT_THAT(help, HasSubstr("--cli-test-db=widgets.db"));
  EXPECT_THAT(help, Not(HasSubstr("cli_test")));
  EXPECT_THAT(help, Not(HasSubstr("--cli-test-sample")));
  EXPECT_THAT(CliHelp(Spec(), "inspect"), Not(HasSubstr("--cli-test-count")));
}

TEST_F(CliTest, HelpLinesFitIn80Columns) {
  for (const char* sub : {"", "make", "inspect"}) {
    const std::string help = CliHelp(Spec(), sub);
    for (absl::string_view line : absl::StrSplit(help, '\n')) {
      EXPECT_LE(line.size(), 80u) << line;
    }
  }
  // The long help sentence wrapped rather than lost.
  EXPECT_THAT(CliHelp(Spec(), "make"), HasSubstr("long enough to wrap."));
}

TEST(CliDeathTest, SpecNamingAnUndeclaredFlagIsAProgrammingError) {
  CliSpec spec{"widgetctl", "", {Subcommand{"make", "", {"no_such_flag"}, {}}}};
  const char* argv[] = {"widgetctl", "make"};
  EXPECT_DEATH((void)ParseCli(spec, 2, argv), "no_such_flag");
}

}  // namespace
}  // namespace kvcanary
