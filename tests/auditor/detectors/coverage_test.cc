// Each registered detector's coverage, as a campaign judges it: counted
// from the answers it was fed, against the floor, inconclusive where a
// calibration it depends on or its positive control failed, disabled (and
// so not required) where it does not apply.
#include <string>
#include <vector>

#include "auditor/detectors/registry.h"
#include "auditor/trace/join.h"
#include "gtest/gtest.h"
#include "tests/auditor/detectors/harness.h"

namespace kvcanary::auditor {
namespace {

using testing::Answer;
using testing::GoodCalibration;
using testing::Harness;
using testing::Judged;

Completion Refusal() {
  Completion c;
  c.status = 400;
  return c;
}

// Feeds `d` (by name) `n` answers per tenant of the kind it judges, each
// one it should pass.
void FeedWhatItJudges(Harness& h, Detector& d, int n) {
  const std::string& name = d.spec().name;
  if (name == "output_scan") {
    h.Feed(d, ProbeKind::kPlant, n, Answer("Once upon a time.", 200), false,
           /*predicted=*/200);
  } else if (name == "golden") {
    h.Feed(d, ProbeKind::kGolden, n, Answer("", 10));
  } else if (name == "echo") {
    h.Feed(d, ProbeKind::kEcho, n, Answer("", 10));
  } else if (name == "boundary") {
    h.Feed(d, ProbeKind::kPastLimit, n, Refusal());
  } else if (name == "latency") {
    h.FeedPairs(d, ProbeKind::kAtLimit, n, Answer("x", 256, /*ttft_ms=*/100),
                Answer("x", 256, /*ttft_ms=*/100), /*predicted=*/256);
  }
}

const std::vector<std::string> kAnswerDetectors = {
    "output_scan", "golden", "echo", "boundary", "latency"};

TEST(DetectorCoverageTest, EveryAnswerDetectorFedToItsFloorIsActive) {
  for (const std::string& name : kAnswerDetectors) {
    Harness h;
    auto d = h.Make(name);
    FeedWhatItJudges(h, *d, 25);
    const DetectorCoverage c = Judged(*d, 20);
    EXPECT_EQ(c.state, DetectorState::kActive) << name << ": " << c.reason;
    EXPECT_TRUE(c.required) << name;
    EXPECT_EQ(c.coverage.at("acme"), 25) << name;
    EXPECT_EQ(c.unit, d->spec().unit);
  }
}

TEST(DetectorCoverageTest, BelowTheFloorIsInconclusiveNamingEachTenant) {
  for (const std::string& name : kAnswerDetectors) {
    Harness h;
    auto d = h.Make(name);
    FeedWhatItJudges(h, *d, 5);
    const DetectorCoverage c = Judged(*d, 20);
    EXPECT_EQ(c.state, DetectorState::kInconclusive) << name;
    EXPECT_NE(c.reason.find("below the floor of 20"), std::string::npos)
        << name << ": " << c.reason;
    EXPECT_NE(c.reason.find("globex"), std::string::npos) << c.reason;
  }
}

TEST(DetectorCoverageTest, FailedCalibrationsAndControlsAreInconclusive) {
  Calibration cal = GoodCalibration();
  cal.latency.calibrated = false;
  cal.latency.failure = "first-token time does not grow with prompt length";
  cal.plant_failure = "no plant was answered whole alone";
  Harness h(cal);
  for (const char* name : {"latency", "output_scan"}) {
    auto d = h.Make(name);
    FeedWhatItJudges(h, *d, 25);
    EXPECT_EQ(Judged(*d, 20).state, DetectorState::kInconclusive) << name;
  }
  auto golden = h.Make("golden", /*broken=*/true);
  h.Feed(*golden, ProbeKind::kGolden, 1, Answer("", 10));  // variant 0 only
  const DetectorCoverage c = Judged(*golden, 1);
  EXPECT_EQ(c.state, DetectorState::kInconclusive);
  EXPECT_NE(c.reason.find("positive control failed"), std::string::npos);
  EXPECT_NE(c.reason.find("globex exercised 1 of 3"), std::string::npos)
      << c.reason;
}

TEST(DetectorCoverageTest, EchoDisabledIsNotRequiredUnlessRequired) {
  Calibration cal = GoodCalibration();
  cal.echo_disabled = "the model does not echo a nonce alone";
  cal.nonces = {std::nullopt, std::nullopt};
  Harness h(cal);
  auto echo = h.Make("echo");
  const DetectorCoverage c = Judged(*echo, 20);
  EXPECT_EQ(c.state, DetectorState::kDisabled);
  EXPECT_FALSE(c.required);
  EXPECT_EQ(DecideVerdict(absl::OkStatus(), true, 0, {c}, {}).verdict,
            Verdict::kClean);
  // --require echo: a required detector that is disabled is inconclusive.
  const DetectorCoverage required = Judged(*echo, 20, {"echo", "golden"});
  EXPECT_EQ(required.state, DetectorState::kInconclusive);
  auto boundary = h.Make("boundary");
  EXPECT_FALSE(Judged(*boundary, 20, {"echo", "golden"}).required);
}

// A plant the target kept only part of proves nothing about a leak: the
// output scan never counts it, and the boundary detector reports it.
TEST(DetectorCoverageTest, ACutPlantIsABoundaryFindingAndNeverCoverage) {
  Harness h;
  auto scan = h.Make("output_scan");
  auto boundary = h.Make("boundary");
  const Completion cut = Answer("Once upon a time.", 120);
  EXPECT_TRUE(
      h.Feed(*scan, ProbeKind::kPlant, 25, cut, false, /*predicted=*/200)
          .empty());
  const std::vector<Finding> found =
      h.Feed(*boundary, ProbeKind::kPlant, 25, cut, false, /*predicted=*/200);
  ASSERT_EQ(found.size(), 50u);
  EXPECT_EQ(found[0].kind, "prompt_truncated");
  EXPECT_EQ(found[0].group["template"], "plant");
  const DetectorCoverage c = Judged(*scan, 20);
  EXPECT_EQ(c.coverage.at("acme"), 0);
  EXPECT_EQ(c.stats["plants_cut"], 50);
  EXPECT_EQ(c.state, DetectorState::kInconclusive);
}

TEST(DetectorCoverageTest, TraceWithoutTraceIsDisabled) {
  Harness h;
  auto trace = h.Make("trace");
  const DetectorCoverage c = Judged(*trace, 20);
  EXPECT_EQ(c.state, DetectorState::kDisabled);
  EXPECT_EQ(c.disabled, "no --trace");
  EXPECT_FALSE(c.required);
}

TraceTally GoodTrace() {
  TraceTally t;
  t.enabled = true;
  t.reads_checked = 1000;
  t.tenants_named = true;
  t.requests_checked = {{"acme", 40}, {"globex", 40}};
  return t;
}

TEST(TraceCoverageTest, ReadsCheckedForEveryTenantAreCoverage) {
  DetectorCoverage c = TraceCoverage(GoodTrace(), testing::kTenants);
  c.floor = 20;
  c.Judge(testing::kTenants);
  EXPECT_EQ(c.state, DetectorState::kActive) << c.reason;
}

TEST(TraceCoverageTest, NothingSampledIsBlind) {
  TraceTally t = GoodTrace();
  t.reads_checked = 0;
  t.requests_checked.clear();
  const DetectorCoverage c = TraceCoverage(t, testing::kTenants);
  EXPECT_NE(c.failure.find("0 page reads checked"), std::string::npos);
  EXPECT_EQ(c.coverage.at("globex"), 0);
}

TEST(TraceCoverageTest, DroppedEventsAndUnnamedReadsCannotVouch) {
  TraceTally t = GoodTrace();
  t.failures.push_back("12 trace events dropped by http://decode");
  EXPECT_NE(TraceCoverage(t, testing::kTenants)
                .failure.find("12 trace events dropped"),
            std::string::npos);
  TraceTally unnamed = GoodTrace();
  unnamed.tenants_named = false;
  EXPECT_NE(TraceCoverage(unnamed, testing::kTenants)
                .failure.find("no engine request ids"),
            std::string::npos);
}

// Every registered detector's control runs on a good calibration and
// passes, and fails behind --test-break's decorator: a detector that finds
// nothing cannot pass its own control.
TEST(PositiveControlTest, EveryDetectorsControlPassesAndFailsWhenBroken) {
  Harness h;
  for (const DetectorRegistry::Entry& e :
       DetectorRegistry::Global().Entries()) {
    const std::string& name = e.spec.name;
    // An exercise finds nothing itself: it has no control (its coverage
    // counts what it did).
    if (e.spec.exercise) {
      EXPECT_FALSE(RunControl(*h.Make(name)).has_value()) << name;
      continue;
    }
    const std::optional<bool> real = RunControl(*h.Make(name));
    ASSERT_TRUE(real.has_value()) << name << " has no control to run";
    EXPECT_TRUE(*real) << name;
    EXPECT_EQ(RunControl(*h.Make(name, /*broken=*/true)), false) << name;
  }
}

TEST(PositiveControlTest, ADetectorWithNothingCalibratedToRunOnHasNone) {
  Calibration cal = GoodCalibration();
  cal.golden.clear();
  cal.echo_disabled = "never echoes";
  cal.golden_logprobs = LogprobCalibration{};
  cal.scored = LogprobCalibration{};
  cal.scored.disabled = "echo with logprobs refused (400)";
  Harness h(cal);
  for (const char* name :
       {"golden", "echo", "logprob_golden", "prompt_logprobs"}) {
    EXPECT_FALSE(RunControl(*h.Make(name)).has_value()) << name;
  }
}

}  // namespace
}  // namespace kvcanary::auditor
