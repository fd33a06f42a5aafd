// logprob_golden and prompt_logprobs (auditor/detectors/logprob_judge.h):
// an answer's log-probabilities against those alone, bitwise on an exact
// target and by distance rates otherwise; fewer scored positions than alone
// is a prompt not processed whole; disabled with the reason where the
// target gives none; their controls pass and a broken one fails.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "auditor/detectors/logprob_judge.h"
#include "gtest/gtest.h"
#include "tests/auditor/detectors/harness.h"

namespace kvcanary::auditor {
namespace {

using testing::Answer;
using testing::Harness;
using testing::Judged;

std::vector<AnswerLogprob> Positions(double first) {
  return {{" Once", first, {{" Once", first}, {" The", -2.5}}},
          {" upon", -0.125, {{" upon", -0.125}}},
          {" a", -0.5, {}}};
}

Calibration WithLogprobs(LogprobMode mode) {
  Calibration c = testing::GoodCalibration();
  for (LogprobCalibration* l : {&c.golden_logprobs, &c.scored}) {
    l->mode = mode;
    for (int v = 0; v < 3; ++v) {
      l->alone[v] = Positions(-0.25);
      if (mode == LogprobMode::kDistance) l->by_distance.insert(v);
    }
  }
  return c;
}

// The i-th golden probe of a run: variants in turn.
Probe GoldenProbe(int i, bool baseline) {
  Probe p;
  p.kind = ProbeKind::kGolden;
  p.golden_variant = i % 3;
  p.baseline = baseline;
  return p;
}

Completion WithPositions(std::vector<AnswerLogprob> positions) {
  Completion c = Answer("x", 10);
  c.logprobs.present = true;
  c.logprobs.positions = std::move(positions);
  return c;
}

TEST(LogprobJudgeTest, ComparesTokensFiguresAndCounts) {
  const auto alone = Positions(-0.25);
  EXPECT_TRUE(CompareLogprobs(alone, alone).same);
  EXPECT_EQ(LogprobDistance(CompareLogprobs(alone, alone)), 0);
  const LogprobDiff nudged = CompareLogprobs(alone, Positions(-0.3125));
  EXPECT_FALSE(nudged.same);
  EXPECT_EQ(nudged.first_difference, 0);
  EXPECT_FALSE(nudged.tokens_differ);
  EXPECT_DOUBLE_EQ(nudged.max_delta, 0.0625);
  // Another token at 1: judged by how far the figures had moved up to
  // there (its alternatives included), never past it.
  auto other = alone;
  other[1].token = " in";
  other[2].logprob = -1.5;
  const LogprobDiff took = CompareLogprobs(alone, other);
  EXPECT_TRUE(took.tokens_differ);
  EXPECT_DOUBLE_EQ(took.max_delta, 1.0);
  EXPECT_EQ(LogprobDistance(took), 0);
  other[1].top = {{" upon", -0.625}};
  EXPECT_DOUBLE_EQ(LogprobDistance(CompareLogprobs(alone, other)), 0.5);
  auto cut = alone;
  cut.pop_back();
  const LogprobDiff shorter = CompareLogprobs(alone, cut);
  EXPECT_EQ(shorter.first_difference, 2);
  EXPECT_EQ(shorter.got_positions, 2);
  EXPECT_EQ(LogprobDistance(shorter), 0);
  EXPECT_TRUE(std::isinf(LogprobDistance(CompareLogprobs(alone, {}))));
}

TEST(LogprobJudgeTest, DistanceRatesRiseOnlyAboveTheBaselinesSpread) {
  DistanceRates same, rising;
  for (int i = 0; i < 30; ++i) {
    same.Add(true, i * 1e-7);
    same.Add(false, (29 - i) * 1e-7);
    rising.Add(true, i * 1e-7);
    rising.Add(false, i % 3 == 0 ? 1e-7 : 0.5);
  }
  ASSERT_TRUE(same.Judge().has_value());
  EXPECT_FALSE(same.Judge()->rise.rises);
  ASSERT_TRUE(rising.Judge().has_value());
  EXPECT_TRUE(rising.Judge()->rise.rises);
  DistanceRates few;
  for (int i = 0; i < 9; ++i) few.Add(true, 0);
  EXPECT_FALSE(few.Judge().has_value());
}

// The smallest rise a rate test could see at its sample sizes: a few
// points on a quiet baseline with many answers, none on a baseline that
// already diverges every time, and blind past kBlindRise.
TEST(RatesTest, TheSmallestVisibleRiseDecidesWhetherARateTestIsBlind) {
  const std::optional<double> quiet = SmallestDetectableRise(2, 200, 200);
  ASSERT_TRUE(quiet.has_value());
  EXPECT_LT(*quiet, 0.10);
  // The rise it names is the first that JudgeRateRise calls.
  const int k = static_cast<int>(std::lround((*quiet + 0.01) * 200));
  EXPECT_TRUE(JudgeRateRise(2, 200, k, 200).rises);
  EXPECT_FALSE(JudgeRateRise(2, 200, k - 1, 200).rises);
  EXPECT_EQ(BlindRateReason(2, 200, 200, "diverged"), "");
  EXPECT_FALSE(SmallestDetectableRise(40, 40, 40).has_value());
  EXPECT_NE(BlindRateReason(40, 40, 40, "diverged").find("no rise at all"),
            std::string::npos);
  // A fifth diverging already, 20 answers a side: only a large rise.
  const std::string half = BlindRateReason(4, 20, 20, "diverged");
  EXPECT_NE(half.find("4 of 20 diverged"), std::string::npos) << half;
  EXPECT_NE(half.find("blind above 30"), std::string::npos) << half;
  EXPECT_FALSE(SmallestDetectableRise(0, 9, 40).has_value());
}

// Distance mode whose same-tenant answers are so far apart that only a
// large rise could show: disabled, saying so, never active.
TEST(LogprobGoldenTest, DistanceModeBlindOnThisTargetIsDisabledWithWhy) {
  Harness h(WithLogprobs(LogprobMode::kDistance));
  auto d = h.Make("logprob_golden");
  FindingList found;
  for (int i = 0; i < 24; ++i) {
    const Probe p = GoldenProbe(i, /*baseline=*/i % 2 == 0);
    // No position at all: an infinite distance on both sides.
    d->Judge(p,
             WithPositions(i % 4 < 2 ? std::vector<AnswerLogprob>{}
                                     : Positions(-0.25)),
             {}, found);
  }
  const DetectorCoverage cov = Judged(*d, 1);
  EXPECT_NE(cov.disabled.find("blind on this target"), std::string::npos)
      << cov.disabled;
  EXPECT_EQ(cov.state, DetectorState::kDisabled) << cov.reason;
}

TEST(LogprobGoldenTest, ExactTargetAnyChangedFigureIsAFinding) {
  Harness h(WithLogprobs(LogprobMode::kExact));
  auto d = h.Make("logprob_golden");
  EXPECT_TRUE(h.Feed(*d, ProbeKind::kGolden, 5, WithPositions(Positions(-0.25)))
                  .empty());
  // The text would be the same: only a figure moved.
  const auto found =
      h.Feed(*d, ProbeKind::kGolden, 1, WithPositions(Positions(-0.2500001)));
  ASSERT_EQ(found.size(), 2u);  // one per tenant
  EXPECT_EQ(found[0].kind, "logprob_mismatch");
  EXPECT_FALSE(found[0].detail["tokens_differ"].get<bool>());
  EXPECT_EQ(found[0].detail.dump().find("upon"), std::string::npos)
      << "no answer text in a finding";
  const DetectorCoverage cov = Judged(*d, 5);
  EXPECT_EQ(cov.state, DetectorState::kActive) << cov.reason;
}

TEST(PromptLogprobsTest, FewerScoredPositionsThanAloneIsAFindingInAnyMode) {
  for (LogprobMode mode : {LogprobMode::kExact, LogprobMode::kDistance}) {
    Harness h(WithLogprobs(mode));
    auto d = h.Make("prompt_logprobs");
    auto cut = Positions(-0.25);
    cut.pop_back();
    const auto found = h.Feed(*d, ProbeKind::kScore, 1, WithPositions(cut));
    ASSERT_EQ(found.size(), 2u) << LogprobModeName(mode);
    EXPECT_EQ(found[0].kind, "prompt_scored_short");
    EXPECT_EQ(found[0].severity, Severity::kHigh);
  }
}

TEST(LogprobGoldenTest, DistanceModeJudgesRatesAgainstTheBaseline) {
  Harness h(WithLogprobs(LogprobMode::kDistance));
  auto d = h.Make("logprob_golden");
  FindingList found;
  for (int i = 0; i < 40; ++i) {
    const Probe p = GoldenProbe(i, /*baseline=*/i < 20);
    // Same-tenant load: tiny noise; cross-tenant: four in five far off.
    const double off =
        p.baseline ? -0.25 - i * 1e-7 : (i % 5 ? -1.5 : -0.25 - 1e-7);
    d->Judge(p, WithPositions(Positions(off)), {}, found);
  }
  EXPECT_TRUE(found.findings.empty()) << "none before the end";
  CampaignIo io;
  ASSERT_TRUE(d->Finish(io, found).ok());
  ASSERT_EQ(found.findings.size(), 1u);
  EXPECT_EQ(found.findings[0].kind, "logprob_distance_rate");
}

// A variant that varies alone is judged by rates; the others stay
// bitwise: a changed figure on one of those is a finding at once.
TEST(LogprobGoldenTest, VariantsExactAloneStayBitwiseBesideOnesByDistance) {
  Calibration c = WithLogprobs(LogprobMode::kExact);
  c.golden_logprobs.mode = LogprobMode::kDistance;
  c.golden_logprobs.by_distance = {0};
  Harness h(c);
  auto d = h.Make("logprob_golden");
  FindingList found;
  Probe p;
  p.kind = ProbeKind::kGolden;
  p.golden_variant = 0;
  d->Judge(p, WithPositions(Positions(-0.3)), {}, found);
  EXPECT_TRUE(found.findings.empty());
  p.golden_variant = 1;
  d->Judge(p, WithPositions(Positions(-0.3)), {}, found);
  ASSERT_EQ(found.findings.size(), 1u);
  EXPECT_EQ(found.findings[0].kind, "logprob_mismatch");
  EXPECT_EQ(RunControl(*d), true);
}

TEST(LogprobGoldenTest, DisabledWithTheReasonWhereTheTargetGivesNone) {
  Calibration c = testing::GoodCalibration();
  c.golden_logprobs = LogprobCalibration{};
  c.golden_logprobs.disabled =
      "the target returns no log-probabilities ({\"logprobs\":5} answered "
      "with logprobs null or absent)";
  Harness h(c);
  auto d = h.Make("logprob_golden");
  h.Feed(*d, ProbeKind::kGolden, 3, Answer("a", 10));
  const DetectorCoverage cov = Judged(*d, 3);
  EXPECT_EQ(cov.disabled, c.golden_logprobs.disabled);
  EXPECT_FALSE(cov.required);
}

TEST(LogprobGoldenTest, ControlsPassAndABrokenOneFails) {
  for (const char* name : {"logprob_golden", "prompt_logprobs"}) {
    for (LogprobMode mode : {LogprobMode::kExact, LogprobMode::kDistance}) {
      Harness h(WithLogprobs(mode));
      EXPECT_EQ(RunControl(*h.Make(name)), true) << name;
      EXPECT_EQ(RunControl(*h.Make(name, /*broken=*/true)), false) << name;
    }
  }
}

}  // namespace
}  // namespace kvcanary::auditor
