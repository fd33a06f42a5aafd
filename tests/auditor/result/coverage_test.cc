// Verdicts are earned: clean only when every required detector reached its
// floor for every tenant; failures and gaps are inconclusive, never clean.
#include "auditor/result/coverage.h"

#include "auditor/campaign/coverage.h"
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

TEST(FloorFlagTest, DefaultThenOverrides) {
  auto f = ParseFloors("20,trace=5, echo=10");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)[""], 20);
  EXPECT_EQ((*f)["trace"], 5);
  EXPECT_EQ((*f)["echo"], 10);
  EXPECT_FALSE(ParseFloors("tracer=5").ok());
  EXPECT_FALSE(ParseFloors("-1").ok());
  EXPECT_FALSE(ParseFloors("0").ok());  // active with nothing checked
  EXPECT_FALSE(ParseFloors("20,trace=0").ok());
  EXPECT_FALSE(ParseFloors("golden=many").ok());
  EXPECT_FALSE(ParseDetectorList("golden,psychic").ok());
  EXPECT_EQ(ParseDetectorList("golden,echo")->size(), 2u);
}

CoverageInputs Inputs(const Calibration* cal) {
  CoverageInputs in;
  in.tenants = kTenants;
  in.floors = {{"", 20}};
  in.calibration = cal;
  in.tallies.resize(2);
  for (TenantTally& t : in.tallies) {
    t.plants_whole = t.scanned = t.golden = t.echo = t.boundary = t.latency =
        25;
    t.golden_variants = {0, 1, 2};
  }
  in.trace.enabled = true;
  in.trace.reads_checked = 1000;
  in.trace.tenants_named = true;
  in.trace.requests_checked = {{"acme", 40}, {"globex", 40}};
  return in;
}

Calibration GoodCalibration() {
  Calibration c;
  c.golden = {{0, "a"}, {1, "b"}, {2, "c"}};
  c.nonces = {canaries::DeriveNonce("k", "acme", "c", 0),
              canaries::DeriveNonce("k", "globex", "c", 0)};
  c.latency.calibrated = true;
  c.unit_tokens = 6;
  c.limit.prompt_tokens = c.limit.refuse_above = 256;
  return c;
}

const DetectorCoverage& Find(const std::vector<DetectorCoverage>& ds,
                             const std::string& name) {
  for (const DetectorCoverage& d : ds) {
    if (d.name == name) return d;
  }
  static DetectorCoverage none;
  return none;
}

TEST(CampaignCoverageTest, EverythingCoveredIsAllActive) {
  const Calibration cal = GoodCalibration();
  for (const DetectorCoverage& d : BuildCoverage(Inputs(&cal))) {
    EXPECT_EQ(d.state, DetectorState::kActive) << d.name << ": " << d.reason;
    EXPECT_TRUE(d.required) << d.name;
  }
}

TEST(CampaignCoverageTest, TraceWithNothingSampledIsBlind) {
  const Calibration cal = GoodCalibration();
  CoverageInputs in = Inputs(&cal);
  in.trace.reads_checked = 0;
  in.trace.requests_checked.clear();
  const auto ds = BuildCoverage(in);
  const DetectorCoverage& d = Find(ds, "trace");
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("0 page reads checked"), std::string::npos)
      << d.reason;
}

TEST(CampaignCoverageTest, DroppedTraceEventsAreInconclusive) {
  const Calibration cal = GoodCalibration();
  CoverageInputs in = Inputs(&cal);
  in.trace.failures.push_back("12 trace events dropped by http://decode");
  const auto ds = BuildCoverage(in);
  const DetectorCoverage& d = Find(ds, "trace");
  EXPECT_EQ(d.state, DetectorState::kInconclusive);
  EXPECT_NE(d.reason.find("12 trace events dropped"), std::string::npos);
}

TEST(CampaignCoverageTest, NoTraceAndNoEchoAreDisabledNotRequired) {
  Calibration cal = GoodCalibration();
  cal.echo_disabled = "the model does not echo a nonce alone";
  cal.nonces = {std::nullopt, std::nullopt};
  CoverageInputs in = Inputs(&cal);
  in.trace = TraceTally{};
  const auto ds = BuildCoverage(in);
  EXPECT_EQ(Find(ds, "echo").state, DetectorState::kDisabled);
  EXPECT_FALSE(Find(ds, "echo").required);
  EXPECT_EQ(Find(ds, "trace").state, DetectorState::kDisabled);
  EXPECT_EQ(DecideVerdict(absl::OkStatus(), true, 0, ds, {}).verdict,
            Verdict::kClean);
  // --require echo: a required detector that is disabled is inconclusive.
  in.required = {"echo", "golden"};
  const auto required = BuildCoverage(in);
  EXPECT_EQ(Find(required, "echo").state, DetectorState::kInconclusive);
  EXPECT_FALSE(Find(required, "boundary").required);
}

TEST(CampaignCoverageTest, FailedCalibrationsAndControlsAreInconclusive) {
  Calibration cal = GoodCalibration();
  cal.latency.calibrated = false;
  cal.latency.failure = "first-token time does not grow with prompt length";
  cal.plant_failure = "no plant was answered whole alone";
  CoverageInputs in = Inputs(&cal);
  in.controls = {{"golden", false}};
  in.tallies[1].golden_variants = {0};
  const auto ds = BuildCoverage(in);
  EXPECT_EQ(Find(ds, "latency").state, DetectorState::kInconclusive);
  EXPECT_EQ(Find(ds, "output_scan").state, DetectorState::kInconclusive);
  const DetectorCoverage& golden = Find(ds, "golden");
  EXPECT_EQ(golden.state, DetectorState::kInconclusive);
  EXPECT_NE(golden.reason.find("positive control failed"), std::string::npos);
  EXPECT_NE(golden.reason.find("globex exercised 1 of 3"), std::string::npos)
      << golden.reason;
}

TEST(CampaignCoverageTest, RefusedProbesAreATenantProblem) {
  const Calibration cal = GoodCalibration();
  CoverageInputs in = Inputs(&cal);
  in.tallies[1].refused = 57;
  const auto problems = TenantProblems(in);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("globex: 57 probes refused"), std::string::npos);
}

}  // namespace
}  // namespace kvcanary::auditor
