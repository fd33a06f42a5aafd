// The limit measurement (auditor/target/limits.h) against simulated
// targets, a function standing for one prompt sent alone: bounded by the
// longest prompt seen whole and the shortest seen cut or refused, narrowed
// by bisection, re-checked — never a count a target reported for a prompt it
// cut.
#include "auditor/target/limits.h"

#include <functional>
#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

// What a simulated target answers for a prompt of `n` tokens.
using Server = std::function<LadderAnswer(int n)>;

// A filler that builds prompts of any length from 10 tokens up (a pad word
// exists), or only of 10 + 5k tokens (`grain` 5: the nearest below).
LimitProbe Filler(const Server& server, int grain, std::vector<int>* sent) {
  return [server, grain, sent](int tokens) {
    LadderStep s;
    if (tokens < 10) {
      s.predicted = -1;
      return s;
    }
    s.predicted = 10 + (tokens - 10) / grain * grain;
    if (sent != nullptr) sent->push_back(s.predicted);
    s.answer = server(s.predicted);
    return s;
  };
}

LimitMeasureOptions Options(int grain, int max_tokens = 100000) {
  LimitMeasureOptions o;
  o.shortest_tokens = 10;
  o.grain_tokens = grain;
  o.max_tokens = max_tokens;
  return o;
}

LadderAnswer Refuses(int n, int limit) {
  return n > limit ? LadderAnswer{400, -1} : LadderAnswer{200, n};
}

// llama.cpp's context shift with n_ctx = limit + 1, n_keep = 4.
LadderAnswer KeepsHeadAndTail(int n, int limit) {
  if (n <= limit) return {200, n};
  const int block = (limit + 1 - 4) / 2;
  return {200, n - (n - 4 - block) / block * block};
}

TEST(MeasureLimitTest, ARefusingTargetIsMeasuredToTheToken) {
  std::vector<int> sent;
  const LadderResult r = MeasureLimit(
      Filler([](int n) { return Refuses(n, 300); }, 1, &sent), Options(5));
  EXPECT_TRUE(r.found) << r.how;
  EXPECT_EQ(r.limit, 300);
  EXPECT_EQ(r.upper, 301);
  EXPECT_FALSE(r.truncates);
  EXPECT_EQ(r.refused_status, 400);
  EXPECT_NE(r.how.find("refused (HTTP 400) from 301"), std::string::npos)
      << r.how;
  EXPECT_NE(r.how.find("both bounds held"), std::string::npos) << r.how;
  EXPECT_LT(sent.size(), 24u);
  // The re-check sent both bounds last.
  ASSERT_GE(sent.size(), 2u);
  EXPECT_EQ(sent[sent.size() - 2], 300);
  EXPECT_EQ(sent.back(), 301);
}

TEST(MeasureLimitTest, WithoutAPadTheBoundsAreTheFillersGrain) {
  const LadderResult r = MeasureLimit(
      Filler([](int n) { return Refuses(n, 300); }, 5, nullptr), Options(5));
  EXPECT_TRUE(r.found) << r.how;
  EXPECT_EQ(r.limit, 300);  // 10 + 58 × 5
  EXPECT_EQ(r.upper, 305);
  EXPECT_NE(r.how.find("301 to 304 not tried"), std::string::npos) << r.how;
}

// The server: 166 -> 102, 130 -> 66 (cut), 112 and 121 whole. The
// limit is where prompts stop being whole, not a count it kept.
TEST(MeasureLimitTest, HeadAndTailKeepingIsBoundedByWholeAndCutPrompts) {
  const LadderResult r = MeasureLimit(
      Filler([](int n) { return KeepsHeadAndTail(n, 127); }, 1, nullptr),
      Options(6));
  EXPECT_TRUE(r.found) << r.how;
  EXPECT_EQ(r.limit, 127);
  EXPECT_EQ(r.upper, 128);
  EXPECT_TRUE(r.truncates);
  EXPECT_LT(r.truncated.answer.prompt_tokens, r.truncated.predicted);
  EXPECT_EQ(r.truncated.fate, "cut");
  EXPECT_NE(r.how.find("cut from 128"), std::string::npos) << r.how;
  for (const LadderStep& s : r.steps) {
    EXPECT_EQ(s.fate, s.predicted <= 127 ? "whole" : "cut") << s.predicted;
  }
}

TEST(MeasureLimitTest, NoBoundBelowTheCeilingIsNotFound) {
  const LadderResult r = MeasureLimit(Filler(
                                          [](int n) {
                                            return LadderAnswer{200, n};
                                          },
                                          5, nullptr),
                                      Options(5, 2000));
  EXPECT_FALSE(r.found);
  EXPECT_GT(r.limit, 1000);  // the longest seen whole
  EXPECT_EQ(r.upper, 0);
  EXPECT_NE(r.how.find("no refusal or truncation up to 2000"),
            std::string::npos);
}

TEST(MeasureLimitTest, AnotherStatusStopsTheMeasurement) {
  const LadderResult r = MeasureLimit(
      Filler(
          [](int n) {
            return n > 40 ? LadderAnswer{503, -1} : LadderAnswer{200, n};
          },
          1, nullptr),
      Options(1));
  EXPECT_FALSE(r.found);
  EXPECT_TRUE(r.refused_other);
  EXPECT_NE(r.how.find("HTTP 503"), std::string::npos);
}

// A count above the prediction means the filler's model does not hold:
// nothing can be bounded with it.
TEST(MeasureLimitTest, ACountAboveThePredictionStopsTheMeasurement) {
  const LadderResult r =
      MeasureLimit(Filler(
                       [](int n) {
                         return LadderAnswer{200, n > 50 ? n + 9 : n};
                       },
                       1, nullptr),
                   Options(4));
  EXPECT_FALSE(r.found);
  EXPECT_TRUE(r.refused_other);
  EXPECT_NE(r.how.find("counting"), std::string::npos) << r.how;
}

// Bounds that do not hold a second time are no limit: a target whose limit
// moves (replicas with different windows behind one address) is "unknown".
TEST(MeasureLimitTest, BoundsThatDoNotHoldWhenSentAgainAreNotFound) {
  std::map<int, int> times;
  const LadderResult r = MeasureLimit(Filler(
                                          [&times](int n) {
                                            // Every other answer from a replica
                                            // with half the window.
                                            const int limit =
                                                times[n]++ % 2 == 0 ? 300 : 150;
                                            return Refuses(n, limit);
                                          },
                                          1, nullptr),
                                      Options(5));
  EXPECT_FALSE(r.found);
  EXPECT_NE(r.how.find("did not hold"), std::string::npos) << r.how;
}

TEST(MeasureLimitTest, WithinTheToleranceIsWhole) {
  LimitMeasureOptions o = Options(5);
  o.tolerance = 2;
  const LadderResult r = MeasureLimit(
      Filler(
          [](int n) {
            return n > 300 ? LadderAnswer{413, -1} : LadderAnswer{200, n + 2};
          },
          1, nullptr),
      o);
  EXPECT_TRUE(r.found) << r.how;
  EXPECT_EQ(r.limit, 300);
  EXPECT_EQ(r.refused_status, 413);
}

TEST(JudgeCountTest, WholeCutOverOrUnknown) {
  EXPECT_EQ(JudgeCount(100, 100, 0), CountFate::kWhole);
  EXPECT_EQ(JudgeCount(100, 98, 2), CountFate::kWhole);
  EXPECT_EQ(JudgeCount(100, 97, 2), CountFate::kCut);
  EXPECT_EQ(JudgeCount(100, 103, 2), CountFate::kOver);
  EXPECT_EQ(JudgeCount(100, -1, 2), CountFate::kUnknown);
  EXPECT_STREQ(CountFateName(CountFate::kCut), "cut");
}

}  // namespace
}  // namespace kvcanary::auditor
