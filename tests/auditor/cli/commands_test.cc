// kvcanary-auditor's subcommands as registered by auditor/cli/ (linked into
// this test as into the binary).
#include "auditor/cli/commands.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "auditor/detectors/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/command_checks.h"
#include "tests/temp_path.h"

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
  ::kvcanary::testing::ExpectFlagsDeclaredAndUsed(AuditorCommands(),
                                                  "auditor/cli/");
}

TEST(AuditorCommandsTest, HelpListsEveryCommand) {
  ::kvcanary::testing::ExpectHelpListsEveryCommand(AuditorCommands(), kProgram,
                                                   kSummary);
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

// `probe` of `target` with `flags`: its exit code
// and what it printed on stderr (the campaign prints its verdict on stdout,
// its error on stderr). The flags are restored after.
std::pair<int, std::string> Probe(const std::string& target,
                                  std::vector<std::string> flags) {
  const absl::FlagSaver saver;
  const std::string dir = ::testing::TempDir();
  const std::string tenants =
      absl::StrCat(dir, "/kvcanary-cli-tenants-", getpid(), ".json");
  std::ofstream(tenants) << R"({"tenants": [{"id": "a", "api_key": "k1"},)"
                         << R"( {"id": "b", "api_key": "k2"}]})";
  std::vector<std::string> args = {
      "kvcanary-auditor",
      "probe",
      "--target=" + target,
      "--tenants=" + tenants,
      "--db=" + testing_paths::UniqueTempPath("kvcanary-cli", "probe.db"),
      "--quiet"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = RunCommandLine(AuditorCommands(), kProgram, kSummary,
                                static_cast<int>(argv.size()), argv.data());
  const std::string text = ::testing::internal::GetCapturedStderr();
  (void)::testing::internal::GetCapturedStdout();
  return {rc, text};
}

std::pair<int, std::string> ProbeUnreachable(std::vector<std::string> flags) {
  return Probe("http://127.0.0.1:1", std::move(flags));
}

// --require, --floor and --test-break take every registered detector,
// kv_events included: the campaign starts (and finds nothing listening);
// a name no detector has is refused before it.
TEST(AuditorCommandsTest, DetectorFlagsTakeEveryRegisteredDetector) {
  for (const std::string& name : DetectorRegistry::Global().Names()) {
    const auto [rc, err] =
        ProbeUnreachable({"--require=" + name, "--floor=20," + name + "=2"});
    EXPECT_EQ(rc, 2) << name;
    EXPECT_THAT(err, ::testing::HasSubstr("unreachable")) << name;
    EXPECT_THAT(err, ::testing::Not(::testing::HasSubstr("unknown detector")));
  }
  const auto [rc, err] = ProbeUnreachable({"--test-break=kv_events"});
  EXPECT_THAT(err, ::testing::HasSubstr("unreachable"));
  for (const char* bad :
       {"--require=psychic", "--floor=20,psychic=2", "--test-break=psychic"}) {
    const auto [bad_rc, bad_err] = ProbeUnreachable({bad});
    EXPECT_EQ(bad_rc, 2) << bad;
    EXPECT_THAT(bad_err, ::testing::HasSubstr("unknown detector 'psychic'"))
        << bad;
  }
}

// A report that cannot be written is an error, but it does not hide the
// findings the campaign proved: exit 1, the write's error on stderr.
TEST(AuditorCommandsTest, AnUnwritableReportAfterFindingsStillExitsOne) {
  namespace fakes = ::kvcanary::auditor::testing;
  fakes::FakeTargetOptions fo;
  fo.flavor = fakes::Flavor::kOllama;
  fo.limit_tokens = 400;
  fo.prefill_us_per_token = 250;
  fo.over_limit = fakes::OverLimit::kKeepTail;  // cuts: findings
  fakes::FakeTarget target(fo);
  const auto [rc, err] =
      Probe(target.url(), {"--max-probes=120", "--duration=30", "--floor=4",
                           "--html=/nonexistent-dir/report.html"});
  EXPECT_EQ(rc, 1) << err;
  EXPECT_THAT(err, ::testing::HasSubstr("/nonexistent-dir/report.html"));
}

}  // namespace
}  // namespace kvcanary::auditor::cli
