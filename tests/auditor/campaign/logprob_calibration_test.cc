// What calibration makes of a target's log-probabilities
// (auditor/campaign/logprob_calibration.h), against simulated targets:
// bitwise-repeatable answers alone give exact mode, answers that vary give
// distance mode, and a target that refuses the parameter, returns null or
// ignores echo leaves the detector disabled, saying why.
#include "auditor/campaign/logprob_calibration.h"

#include <set>
#include <string>

#include "absl/strings/match.h"
#include "auditor/campaign/calibrate.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

struct SimTarget {
  bool logprobs = true;
  bool echo = true;
  bool varies = false;    // a figure differs between two answers alone
  int refuse_status = 0;  // answer requests asking for logprobs with this
  int vary_call = -1;     // this call's figures alone are moved
  mutable int answered = 0;

  Completion operator()(const AuditTenant&, const std::string& prompt,
                        int max_tokens, bool,
                        const nlohmann::json& extra) const {
    Completion c;
    if (refuse_status != 0) {
      c.status = refuse_status;
      return c;
    }
    c.status = 200;
    c.usable = true;
    c.text = " the end";
    double figure = varies ? -0.5 - 1e-6 * answered : -0.5;
    if (answered == vary_call) figure -= 1e-6;
    ++answered;
    if (!logprobs) return c;
    c.logprobs.present = true;
    if (extra.value("echo", false) && echo) {
      c.text = prompt + c.text;
      for (int i = 0; i < 6; ++i) {
        c.logprobs.positions.push_back({" p", -1.0, {}});
      }
    }
    for (int i = 0; i < max_tokens; ++i) {
      c.logprobs.positions.push_back({" the", figure, {{" the", figure}}});
    }
    return c;
  }
};

Calibration WithGolden() {
  Calibration c;
  c.golden_prefix = "zq";
  c.golden = {{0, "a"}, {1, "b"}, {2, "c"}};
  return c;
}

Calibration Measured(const SimTarget& target) {
  Calibration c = WithGolden();
  CalibrateLogprobs({"acme", "k"}, target, &c);
  return c;
}

TEST(LogprobCalibrationTest, RepeatableAnswersAloneAreJudgedExactly) {
  const Calibration c = Measured(SimTarget{});
  EXPECT_EQ(c.golden_logprobs.mode, LogprobMode::kExact);
  EXPECT_EQ(c.golden_logprobs.alone.size(), 3u);
  EXPECT_EQ(c.golden_logprobs.alone.at(0).size(),
            static_cast<size_t>(kGoldenMaxTokens));
  EXPECT_EQ(c.scored.mode, LogprobMode::kExact);
  EXPECT_EQ(c.scored.alone.at(0).size(), 7u);  // 6 prompt + 1 generated
  EXPECT_EQ(c.requests, 12);
  const nlohmann::json e = c.golden_logprobs.ToEvidence();
  EXPECT_EQ(e["mode"], "exact");
  EXPECT_EQ(e.dump().find("the"), std::string::npos) << "no text in evidence";
}

TEST(LogprobCalibrationTest, AnswersThatVaryAloneAreJudgedByDistance) {
  SimTarget t;
  t.varies = true;
  const Calibration c = Measured(t);
  EXPECT_EQ(c.golden_logprobs.mode, LogprobMode::kDistance);
  EXPECT_EQ(c.scored.mode, LogprobMode::kDistance);
  EXPECT_TRUE(c.NeedsGoldenBaseline());
}

// As golden judges its variants one by one: a variant whose answers alone
// differ is judged by distance, the others still bitwise.
TEST(LogprobCalibrationTest, OnlyTheVariantThatVariesAloneIsJudgedByDistance) {
  SimTarget t;
  t.vary_call = 3;  // variant 1's second answer
  const Calibration c = Measured(t);
  EXPECT_EQ(c.golden_logprobs.mode, LogprobMode::kDistance);
  EXPECT_EQ(c.golden_logprobs.by_distance, std::set<int>({1}));
  EXPECT_EQ(c.scored.mode, LogprobMode::kExact);
}

// A target that is bitwise repeatable alone but whose figures move with
// the batch (not batch-invariant): each variant is also sent twice under
// same-tenant load; those that move there are judged by distance, and
// golden judges their text by rate; a batch that moves nothing keeps exact.
TEST(LogprobCalibrationTest,
     FiguresThatMoveUnderSameTenantLoadAreJudgedByDistance) {
  for (const double shift : {0.0, 1e-4}) {
    SCOPED_TRACE(shift);
    const SimTarget alone;
    int loaded_calls = 0;
    const SendLoaded loaded = [&](const AuditTenant& t,
                                  const std::string& prompt, int max_tokens,
                                  const nlohmann::json& extra) {
      ++loaded_calls;
      Completion c = alone(t, prompt, max_tokens, false, extra);
      for (AnswerLogprob& a : c.logprobs.positions) {
        if (a.logprob.has_value() && *a.logprob > -1.0) *a.logprob -= shift;
      }
      return c;
    };
    Calibration c = WithGolden();
    CalibrateLogprobs({"acme", "k"}, alone, &c, /*chat=*/false, loaded);
    const std::set<int> all = {0, 1, 2};
    if (shift == 0) {
      EXPECT_EQ(c.golden_logprobs.mode, LogprobMode::kExact);
      EXPECT_TRUE(c.golden_by_rate.empty());
      EXPECT_EQ(loaded_calls, 12);  // twice per variant, both kinds
      EXPECT_EQ(c.requests, 24);
    } else {
      EXPECT_EQ(c.golden_logprobs.mode, LogprobMode::kDistance);
      EXPECT_EQ(c.golden_logprobs.moved_under_load, all);
      EXPECT_EQ(c.scored.moved_under_load, all);
      EXPECT_EQ(c.golden_by_rate, all);
      EXPECT_EQ(c.golden_moved_under_load, all);
      EXPECT_EQ(loaded_calls, 6);  // the first one moved: no second
    }
  }
}

TEST(LogprobCalibrationTest, NoneRefusedOrEchoIgnoredDisablesSayingWhy) {
  SimTarget none;
  none.logprobs = false;
  Calibration c = Measured(none);
  EXPECT_EQ(c.golden_logprobs.mode, LogprobMode::kOff);
  EXPECT_TRUE(absl::StrContains(c.golden_logprobs.disabled,
                                "returns no log-probabilities"))
      << c.golden_logprobs.disabled;
  SimTarget refusing;
  refusing.refuse_status = 400;
  c = Measured(refusing);
  EXPECT_TRUE(absl::StrContains(c.scored.disabled, "HTTP 400"))
      << c.scored.disabled;
  SimTarget no_echo;
  no_echo.echo = false;
  c = Measured(no_echo);
  EXPECT_EQ(c.golden_logprobs.mode, LogprobMode::kExact);
  EXPECT_EQ(c.scored.mode, LogprobMode::kOff);
  EXPECT_TRUE(absl::StrContains(c.scored.disabled, "ignores echo"))
      << c.scored.disabled;
  Calibration no_golden;
  CalibrateLogprobs({"acme", "k"}, SimTarget{}, &no_golden);
  EXPECT_EQ(no_golden.scored.disabled, "no golden prompt was calibrated");
}

}  // namespace
}  // namespace kvcanary::auditor
