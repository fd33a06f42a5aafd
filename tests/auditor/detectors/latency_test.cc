// The latency detector's paired sign test: a probe judged against a
// control sent beside it, never against a calibration made earlier.
#include "auditor/detectors/latency.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/auditor/detectors/harness.h"

namespace kvcanary::auditor {
namespace {

using testing::Answer;
using testing::Harness;
using testing::Judged;

const std::vector<std::string> kNames = {"acme", "globex", "initech"};

TimedPair Pair(double probe_ms, double control_ms, int tokens = 256) {
  TimedPair p;
  p.probe_ttft_ms = probe_ms;
  p.control_ttft_ms = control_ms;
  p.probe_tokens = p.control_tokens = p.predicted = tokens;
  return p;
}

TEST(LatencyPairsTest, ElevenProbesAllFasterDecideAtHalfAPerMille) {
  EXPECT_EQ(PairsToDecide(kLatencyAlpha / 2), 11);
  std::vector<TimedPair> pairs(11, Pair(2, 30));
  const SignTest t = TestPairs(pairs);
  EXPECT_EQ(t.pairs, 11);
  EXPECT_EQ(t.faster, 11);
  EXPECT_DOUBLE_EQ(t.p_value, std::pow(0.5, 11));
  EXPECT_TRUE(JudgePairs(pairs, "past_limit", kNames, kLatencyAlpha / 2));
  // Ten are not enough, and one slower pair of eleven is not either.
  pairs.resize(10);
  EXPECT_FALSE(JudgePairs(pairs, "past_limit", kNames, kLatencyAlpha / 2));
  pairs.resize(11, Pair(31, 30));
  EXPECT_FALSE(JudgePairs(pairs, "past_limit", kNames, kLatencyAlpha / 2));
}

// A busy healthy server: each pair's two first tokens come from the same
// moment's load (swinging 1x to 20x), the order within the pair random.
// Over 20,000 campaigns of kPairsPerGroup pairs the detector raises a
// finding no more often than its stated α.
TEST(LatencyPairsTest, AHealthyServerUnderSwingingLoadAlarmsAtMostAlpha) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> load(1.0, 20.0), noise(0.8, 1.25);
  int alarms = 0;
  constexpr int kCampaigns = 20000;
  for (int c = 0; c < kCampaigns; ++c) {
    std::vector<TimedPair> pairs;
    for (int i = 0; i < kPairsPerGroup; ++i) {
      const double moment = load(rng);  // both sent back to back
      pairs.push_back(Pair(25 * moment * noise(rng), 25 * moment * noise(rng)));
    }
    alarms +=
        JudgePairs(pairs, "at_limit", kNames, kLatencyAlpha / 2).has_value();
  }
  EXPECT_LE(alarms, kCampaigns * kLatencyAlpha / 2);
}

TEST(LatencyPairsTest, AProbeTheTargetSaysWasShorterIsNotJudged) {
  std::vector<TimedPair> pairs(15, Pair(2, 30));
  for (TimedPair& p : pairs) p.probe_tokens = 100;  // of 256
  const SignTest t = TestPairs(pairs);
  EXPECT_EQ(t.pairs, 0);
  EXPECT_FALSE(JudgePairs(pairs, "at_limit", kNames, kLatencyAlpha / 2));
}

// What the target said of the faster probes names the cause.
TEST(LatencyPairsTest, TheFindingNamesTheCauseTheTargetReported) {
  std::vector<TimedPair> pairs(15, Pair(2, 30));
  for (size_t i = 0; i < pairs.size(); ++i) {
    pairs[i].tenant = static_cast<int>(i % 2);
    pairs[i].probe = static_cast<int64_t>(i);
  }
  auto f = JudgePairs(pairs, "past_limit", kNames, kLatencyAlpha / 2);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, "latency_implausible");
  EXPECT_EQ(f->reader, "acme,globex");
  EXPECT_EQ(f->group["cause"], "prompt_not_prefilled");
  EXPECT_EQ(f->detail["probes"].size(), 15u);
  for (TimedPair& p : pairs) p.cached_tokens = 200;
  EXPECT_EQ(JudgePairs(pairs, "past_limit", kNames, kLatencyAlpha / 2)
                ->group["cause"],
            "cached_prefix");
  // Cut by the target (the control was cut to the same count), then
  // served from a cache: the busting prefix was what it cut, and the tail
  // left is what the tenant's own earlier probes shared. Not judged.
  for (TimedPair& p : pairs) {
    p.predicted = 400;
    p.control_tokens = 256;
  }
  EXPECT_FALSE(
      JudgePairs(pairs, "past_limit", kNames, kLatencyAlpha / 2).has_value());
  EXPECT_EQ(TestPairs(pairs).pairs, 0);
  for (TimedPair& p : pairs) p.cached_tokens = 0;
  EXPECT_EQ(JudgePairs(pairs, "past_limit", kNames, kLatencyAlpha / 2)
                ->group["cause"],
            "truncated_prompt");
}

// Through the detector, as a campaign feeds it: probes past the limit
// answered in 2 ms beside controls in 30 ms are one finding; at the limit,
// probes as slow as their controls are none, and every pair counts.
TEST(LatencyDetectorTest, FastProbesBesideSlowControlsAreOneFinding) {
  Harness h;
  auto d = h.Make("latency");
  const auto found =
      h.FeedPairs(*d, ProbeKind::kPastLimit, 8, Answer("x", 370, 2),
                  Answer("x", 256, 30), /*predicted=*/370);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].group["template"], "past_limit");
  EXPECT_EQ(found[0].reader, "acme,globex");
  const DetectorCoverage c = Judged(*d, 5);
  EXPECT_EQ(c.coverage.at("acme"), 8);
}

TEST(LatencyDetectorTest, ProbesAsSlowAsTheirControlsAreNone) {
  Harness h;
  auto d = h.Make("latency");
  EXPECT_TRUE(h.FeedPairs(*d, ProbeKind::kAtLimit, 8, Answer("x", 256, 29),
                          Answer("x", 256, 30), /*predicted=*/256)
                  .empty());
  EXPECT_EQ(Judged(*d, 5).state, DetectorState::kActive);
}

// An unanswered half leaves its pair unjudged: not coverage.
TEST(LatencyDetectorTest, APairWithARefusedHalfIsNotCoverage) {
  Harness h;
  auto d = h.Make("latency");
  Completion refused;
  refused.status = 400;
  EXPECT_TRUE(h.FeedPairs(*d, ProbeKind::kPastLimit, 8, refused,
                          Answer("x", 256, 30), /*predicted=*/370)
                  .empty());
  const DetectorCoverage c = Judged(*d, 5);
  EXPECT_EQ(c.coverage.at("acme"), 0);
  EXPECT_EQ(c.state, DetectorState::kInconclusive);
}

}  // namespace
}  // namespace kvcanary::auditor
