// Verdicts are earned: clean only when every required detector reached its
// floor for every tenant; failures and gaps are inconclusive, never clean.
#include "auditor/result/coverage.h"

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

const std::vector<std::string> kTenants = {"acme", "globex"};

DetectorCoverage Covered(const std::string& name, int each) {
  DetectorCoverage d;
  d.name = name;
  d.floor = 20;
  d.unit = "answers";
  for (const std::string& t : kTenants) d.coverage[t] = each;
  d.Judge(kTenants);
  return d;
}

TEST(CoverageTest, EveryTenantAtTheFloorIsActive) {
  EXPECT_EQ(Covered("golden", 20).state, DetectorState::kActive);
}

TEST(CoverageTest, OneTenantBelowTheFloorIsInconclusiveNamingIt) {
  DetectorCoverage d;
  d.name = "echo";
  d.unit = "echo answers";
  d.coverage = {{"acme", 25}, {"globex", 13}};
  d.Judge(kTenants);
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("globex 13"), std::string::npos) << d.reason;
  EXPECT_EQ(d.reason.find("acme"), std::string::npos) << d.reason;
}

TEST(CoverageTest, ATenantMissingFromTheCountsHasZero) {
  DetectorCoverage d;
  d.coverage = {{"acme", 25}};
  d.Judge(kTenants);
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("globex 0"), std::string::npos);
}

TEST(CoverageTest, AFailureIsInconclusiveWhateverTheCounts) {
  DetectorCoverage d = Covered("latency", 100);
  d.AddFailure("first-token time does not grow with prompt length");
  d.Judge(kTenants);
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("does not grow"), std::string::npos);
}

TEST(CoverageTest, DisabledIsDisabledUnlessRequired) {
  DetectorCoverage d;
  d.name = "trace";
  d.disabled = "no --trace";
  d.required = false;
  d.Judge(kTenants);
  EXPECT_EQ(d.state, DetectorState::kDisabled);
  d.required = true;
  d.Judge(kTenants);
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
}

TEST(VerdictTest, PrecedenceFindingsErrorInconclusiveClean) {
  std::vector<DetectorCoverage> good = {Covered("golden", 30)};
  std::vector<DetectorCoverage> gap = {Covered("golden", 3)};
  const absl::Status down = absl::UnavailableError("target down");
  EXPECT_EQ(DecideVerdict(down, true, 5, good, {}).verdict, Verdict::kFindings);
  EXPECT_EQ(DecideVerdict(down, true, 0, good, {}).verdict, Verdict::kError);
  EXPECT_EQ(DecideVerdict(absl::OkStatus(), true, 5, gap, {}).verdict,
            Verdict::kFindings);
  EXPECT_EQ(DecideVerdict(absl::OkStatus(), true, 0, gap, {}).verdict,
            Verdict::kInconclusive);
  EXPECT_EQ(
      DecideVerdict(absl::OkStatus(), true, 0, good, {"acme: refused"}).verdict,
      Verdict::kInconclusive);
  const VerdictDecision clean =
      DecideVerdict(absl::OkStatus(), true, 0, good, {});
  EXPECT_EQ(clean.verdict, Verdict::kClean);
  EXPECT_TRUE(clean.reasons.empty());
  EXPECT_EQ(clean.error, "");
  // Not required: below the floor does not block clean.
  gap[0].required = false;
  EXPECT_EQ(DecideVerdict(absl::OkStatus(), true, 0, gap, {}).verdict,
            Verdict::kClean);
}

// The target died after the audit proved something: findings (exit 1),
// the error beside them, not in place of them.
TEST(VerdictTest, FindingsProvenBeforeAnErrorOutrankIt) {
  const VerdictDecision v =
      DecideVerdict(absl::UnavailableError("target down at 10:15:02"), true, 42,
                    {Covered("golden", 3)}, {});
  EXPECT_EQ(v.verdict, Verdict::kFindings);
  EXPECT_EQ(static_cast<int>(v.verdict), 1);
  EXPECT_EQ(v.error, "target down at 10:15:02");
  ASSERT_FALSE(v.reasons.empty());
  EXPECT_EQ(v.reasons[0], "42 finding rows");
  // The error is beside the reasons, not one of them.
  for (const std::string& why : v.reasons) {
    EXPECT_EQ(why.find("target down"), std::string::npos) << why;
  }
}

// A refused key, an unreachable target, a bad flag: caught by the start
// checks, before the audit's first probe, so exit 2 whatever else.
TEST(VerdictTest, AnErrorBeforeTheAuditStartedIsAnErrorWhateverElse) {
  const absl::Status refused =
      absl::PermissionDeniedError("tenant 'initech': key refused (HTTP 401)");
  for (size_t findings : {size_t{0}, size_t{3}}) {
    const VerdictDecision v =
        DecideVerdict(refused, /*audit_started=*/false, findings, {}, {});
    EXPECT_EQ(v.verdict, Verdict::kError) << findings;
    EXPECT_EQ(v.error, refused.message());
    EXPECT_EQ(v.reasons,
              std::vector<std::string>{std::string(refused.message())});
  }
  // An error without a message still says something.
  EXPECT_FALSE(DecideVerdict(absl::UnknownError(""), false, 0, {}, {})
                   .reasons[0]
                   .empty());
}

TEST(VerdictTest, ExitCodesAreTheVerdicts) {
  EXPECT_EQ(static_cast<int>(Verdict::kClean), 0);
  EXPECT_EQ(static_cast<int>(Verdict::kFindings), 1);
  EXPECT_EQ(static_cast<int>(Verdict::kError), 2);
  EXPECT_EQ(static_cast<int>(Verdict::kInconclusive), 3);
}

}  // namespace
}  // namespace kvcanary::auditor
