// Calibration against simulated targets (a function standing for one
// request alone): limits measured by the ladder, plants sized to the limit
// and measured whole, latency fits that fail on a flat or cached cost.
#include "auditor/campaign/calibrate.h"

#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "auditor/campaign/plant_calibration.h"
#include "auditor/target/limits.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

// Words and punctuation, plus BOS: the simulated targets' tokenizer.
int Tokens(const std::string& text) {
  int n = 1;
  bool in_word = false;
  for (char c : text) {
    const bool alnum = absl::ascii_isalnum(static_cast<unsigned char>(c));
    if (alnum && !in_word) ++n;
    if (!alnum && !absl::ascii_isspace(static_cast<unsigned char>(c))) ++n;
    in_word = alnum;
  }
  return n;
}

struct SimTarget {
  int limit = 256;
  bool keep_tail = false;  // else refuse past the limit
  // Else: keep the first 4 and the last ones, dropping whole blocks of
  // (limit + 1 - 4) / 2 tokens (llama.cpp's context shift).
  bool keep_head_and_tail = false;
  double per_token_ms = 0.1;
  bool flat = false;  // a constant first-token time (a cache, a fixed delay)
  bool echo = true;
  bool reports_cache_hits = false;  // every prompt says it was cached

  Completion operator()(const AuditTenant&, const std::string& prompt,
                        int max_tokens, bool stream) const {
    Completion c;
    int n = Tokens(prompt);
    if (n > limit) {
      if (keep_head_and_tail) {
        const int block = (limit + 1 - 4) / 2;
        n -= (n - 4 - block) / block * block;
      } else if (!keep_tail) {
        c.status = 400;
        return c;
      } else {
        n = limit;
      }
    }
    c.status = 200;
    c.usable = true;
    c.prompt_tokens = n;
    if (reports_cache_hits) c.cached_tokens = n - 1;
    c.ttft_ms = flat ? 5.0 : 2.0 + per_token_ms * n;
    // The last words of the prompt: a nonce quoted in it comes back.
    std::vector<std::string> words = absl::StrSplit(prompt, ' ');
    const size_t from = words.size() > 12 ? words.size() - 12 : 0;
    for (size_t i = from; i < words.size() && echo; ++i) {
      c.text += " " + words[i];
    }
    if (!echo) c.text = " the end";
    (void)max_tokens;
    (void)stream;
    return c;
  }
};

CalibrationOptions Options() {
  CalibrationOptions o;
  o.tenants = {{"acme", "k1"}, {"globex", "k2"}};
  o.secret_key = "calibration-test-key";
  o.campaign_id = "c-test";
  o.plants_per_tenant = 4;
  return o;
}

TEST(CalibrationTest, UnadvertisedRefusingLimitIsMeasured) {
  SimTarget target;
  const Calibration c = Calibrate(Options(), target);
  EXPECT_EQ(c.limit.source, "measured");
  // To the token: the filler's units are 6 tokens, its pad word one.
  EXPECT_EQ(c.unit_tokens, 6);
  EXPECT_EQ(c.pad, " a");
  EXPECT_EQ(c.limit.prompt_tokens, 256);
  EXPECT_EQ(c.limit.refuse_above, 256);
  EXPECT_NE(c.limit.where.find("refused (HTTP 400) from 257"),
            std::string::npos)
      << c.limit.where;
  EXPECT_TRUE(c.findings.empty());
  EXPECT_GT(c.base_tokens + c.past_limit_units * c.unit_tokens, 256);
  EXPECT_LE(c.base_tokens + c.at_limit_units * c.unit_tokens, 256);
}

TEST(CalibrationTest, SilentTailKeepingIsMeasuredAndIsAFinding) {
  SimTarget target;
  target.keep_tail = true;
  const Calibration c = Calibrate(Options(), target);
  EXPECT_EQ(c.limit.source, "measured");
  EXPECT_EQ(c.limit.prompt_tokens, 256);
  EXPECT_NE(c.limit.where.find("cut from 257"), std::string::npos)
      << c.limit.where;
  ASSERT_EQ(c.findings.size(), 1u);
  EXPECT_EQ(c.findings[0].kind, "prompt_truncated");
  EXPECT_EQ(c.findings[0].group["template"], "ladder");
}

TEST(CalibrationTest, PlantsFillTheLimitAndAreMeasuredWhole) {
  SimTarget target;
  target.limit = 1000;
  CalibrationOptions o = Options();
  o.advertised.prompt_tokens = o.advertised.refuse_above = 1000;
  o.advertised.source = "advertised";
  const Calibration c = Calibrate(o, target);
  EXPECT_TRUE(c.plant_failure.empty()) << c.plant_failure;
  EXPECT_GT(c.sizing.markers_per_plant, 3);
  EXPECT_GT(c.sizing.fill, 0.7);
  EXPECT_LE(c.sizing.fill, 1.0);
  for (const auto& plants : c.plants) {
    ASSERT_EQ(plants.size(), 4u);
    for (const Plant& p : plants) {
      EXPECT_EQ(p.prompt_tokens, Tokens(p.text));
      // The auditor's own prediction, from the plant's halves.
      EXPECT_EQ(p.predicted_tokens, Tokens(p.text));
      EXPECT_LT(p.prompt_tokens, 1000);
    }
  }
  EXPECT_EQ(c.plant_tolerance, 0);
  EXPECT_EQ(c.sizing.cut, 0);
}

// The server: it keeps the head and tail of an over-long prompt
// and advertises nothing. The measured limit is the longest prompt seen
// whole (the shortest cut one is one token longer), never a count it
// reported for a cut prompt, which varies with the prompt's length.
TEST(CalibrationTest, HeadAndTailKeepingIsMeasuredToItsTrueLimit) {
  SimTarget target;
  target.limit = 127;
  target.keep_head_and_tail = true;
  const Calibration c = Calibrate(Options(), target);
  EXPECT_EQ(c.limit.source, "measured") << c.limit.where;
  EXPECT_EQ(c.limit.prompt_tokens, 127) << c.limit.where;
  EXPECT_EQ(c.limit.refuse_above, 127) << c.limit.where;
  ASSERT_TRUE(c.ladder.has_value());
  EXPECT_TRUE(c.ladder->found);
  EXPECT_EQ(c.ladder->upper, 128);
  EXPECT_NE(c.limit.where.find("both bounds held"), std::string::npos)
      << c.limit.where;
  // At-limit probes are processed whole; past-limit ones are past it.
  EXPECT_LE(c.base_tokens + c.at_limit_units * c.unit_tokens, 127);
  EXPECT_GT(c.base_tokens + c.past_limit_units * c.unit_tokens, 128);
  // Plants sized under it are whole.
  EXPECT_TRUE(c.plant_failure.empty()) << c.plant_failure;
  EXPECT_EQ(c.sizing.cut, 0);
  for (const Plant& p : c.plants[0]) EXPECT_LE(Tokens(p.text), 127);
}

// A stated limit the target does not honour: plants sized to it come back
// cut. Each cut is a prompt_truncated finding and never a plant; the plants
// kept are whole by the auditor's prediction.
TEST(CalibrationTest, PlantsTheTargetCutsAloneAreFindingsNeverPlants) {
  SimTarget target;
  target.limit = 300;
  target.keep_head_and_tail = true;
  CalibrationOptions o = Options();
  o.flag_limit = 2000;
  const Calibration c = Calibrate(o, target);
  EXPECT_GT(c.sizing.cut, 0);
  int plant_findings = 0;
  for (const Finding& f : c.findings) {
    if (f.group.value("template", "") != "plant") continue;
    ++plant_findings;
    EXPECT_EQ(f.kind, "prompt_truncated");
    EXPECT_LT(f.detail["reported_prompt_tokens"].get<int>(),
              f.detail["predicted_prompt_tokens"].get<int>());
  }
  EXPECT_EQ(plant_findings, c.sizing.cut);
  EXPECT_TRUE(c.plant_failure.empty()) << c.plant_failure;
  for (const auto& plants : c.plants) {
    EXPECT_FALSE(plants.empty());
    for (const Plant& p : plants) {
      EXPECT_LE(Tokens(p.text), 300);
      EXPECT_EQ(p.predicted_tokens, Tokens(p.text));
    }
  }
}

TEST(CalibrationTest, ASmallLimitGetsShorterPlantsRatherThanNone) {
  SimTarget target;
  target.limit = 36;
  CalibrationOptions o = Options();
  o.advertised.prompt_tokens = o.advertised.refuse_above = 36;
  o.advertised.source = "advertised";
  const Calibration c = Calibrate(o, target);
  EXPECT_TRUE(c.plant_failure.empty()) << c.plant_failure;
  EXPECT_EQ(c.sizing.form, "compact");
  EXPECT_EQ(c.sizing.markers_per_plant, 1);
  // One marker each: twice the plants.
  EXPECT_EQ(c.plants[0].size(), 8u);
}

TEST(CalibrationTest, TooSmallForAnyPlantIsAFailureNotAGuess) {
  SimTarget target;
  target.limit = 16;
  CalibrationOptions o = Options();
  o.advertised.prompt_tokens = o.advertised.refuse_above = 16;
  o.advertised.source = "advertised";
  const Calibration c = Calibrate(o, target);
  EXPECT_FALSE(c.plant_failure.empty());
  EXPECT_TRUE(c.plants[0].empty());
}

TEST(CalibrationTest, LatencyGrowingWithLengthCalibrates) {
  SimTarget target;
  const Calibration c = Calibrate(Options(), target);
  EXPECT_TRUE(c.latency.calibrated) << c.latency.failure;
  EXPECT_NEAR(c.latency.per_token_ms, 0.1, 1e-9);
  EXPECT_GE(c.latency.lengths, 3);
}

TEST(CalibrationTest, AFlatFirstTokenTimeIsAFailedCalibration) {
  SimTarget target;
  target.flat = true;
  const Calibration c = Calibrate(Options(), target);
  EXPECT_FALSE(c.latency.calibrated);
  EXPECT_NE(c.latency.failure.find("does not grow"), std::string::npos)
      << c.latency.failure;
}

TEST(CalibrationTest, ACalibrationServedFromACacheFails) {
  SimTarget target;
  target.reports_cache_hits = true;
  const Calibration c = Calibrate(Options(), target);
  EXPECT_FALSE(c.latency.calibrated);
  EXPECT_NE(c.latency.failure.find("served from a cache"), std::string::npos)
      << c.latency.failure;
}

TEST(CalibrationTest, EveryTimedRequestHasAUniquePrefix) {
  std::set<std::string> prefixes;
  int timed = 0;
  SimTarget target;
  auto send = [&](const AuditTenant& t, const std::string& prompt,
                  int max_tokens, bool stream) {
    if (stream) {
      ++timed;
      prefixes.insert(prompt.substr(0, prompt.find('.')));
    }
    return target(t, prompt, max_tokens, stream);
  };
  Calibrate(Options(), send);
  EXPECT_GE(timed, 15);
  EXPECT_EQ(prefixes.size(), static_cast<size_t>(timed));
}

// Golden answers the same twice alone but another under same-tenant load
// (a target that is not batch-invariant): judged by rate, and recorded as
// moved only under load; answers that hold under load stay exact.
TEST(CalibrationTest, GoldenThatDiffersOnlyUnderSameTenantLoadIsJudgedByRate) {
  for (const bool moves : {false, true}) {
    SCOPED_TRACE(moves);
    const SimTarget target;
    CalibrationOptions o = Options();
    int loaded = 0;
    o.send_loaded = [&](const AuditTenant& t, const std::string& prompt,
                        int max_tokens, const nlohmann::json&) {
      ++loaded;
      Completion c = target(t, prompt, max_tokens, false);
      if (moves) c.text += " then";
      return c;
    };
    const Calibration c = Calibrate(o, target);
    ASSERT_EQ(c.golden.size(), 3u) << c.golden_failure;
    if (moves) {
      EXPECT_EQ(c.golden_by_rate, std::set<int>({0, 1, 2}));
      EXPECT_EQ(c.golden_moved_under_load, std::set<int>({0, 1, 2}));
      EXPECT_EQ(loaded, 3);  // the first answer under load differed
    } else {
      EXPECT_TRUE(c.golden_by_rate.empty());
      EXPECT_EQ(loaded, 6);
    }
  }
}

TEST(CalibrationTest, AModelThatNeverEchoesDisablesEcho) {
  SimTarget target;
  target.echo = false;
  const Calibration c = Calibrate(Options(), target);
  EXPECT_FALSE(c.echo_disabled.empty());
  SimTarget echoing;
  const Calibration e = Calibrate(Options(), echoing);
  EXPECT_TRUE(e.echo_disabled.empty());
  EXPECT_TRUE(e.nonces[0].has_value());
  EXPECT_TRUE(e.nonces[1].has_value());
}

TEST(PlantSplitTest, SplitsAtTheParagraphOrSentenceNearestTheMiddle) {
  const std::string two =
      "Once upon a time, there was a cat. The cat knew a secret song: a b. "
      "Every day the cat sang it.\nOnce upon a time, there was a dog. The dog "
      "knew a secret song: c d. Every day the dog sang it.";
  const bool breaks[kPlantBreaks] = {true, true, false};
  auto s = SplitPlant(two, breaks);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->kind, PlantBreak::kParagraph);
  EXPECT_EQ(two[s->at], '\n');
  const bool sentences[kPlantBreaks] = {false, true, false};
  s = SplitPlant(two, sentences);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->kind, PlantBreak::kSentence);
  EXPECT_EQ(two.substr(s->at + 1, 4), "The ");
  // One sentence: only between two words.
  EXPECT_FALSE(SplitPlant("The song: a b c.", breaks).has_value());
  const bool words[kPlantBreaks] = {false, false, true};
  s = SplitPlant("The song: a b c.", words);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->kind, PlantBreak::kWord);
  EXPECT_EQ(s->at, 11u);  // between "a" and "b"
  const bool none[kPlantBreaks] = {false, false, false};
  EXPECT_FALSE(SplitPlant(two, none).has_value());
}

TEST(LatencyFitTest, NeedsThreeLengthsAGoodFitAndAMeasurablePrefill) {
  EXPECT_FALSE(FitLatency({{10, 1}, {20, 2}}).calibrated);
  EXPECT_TRUE(FitLatency({{10, 1}, {100, 10}, {200, 20}}).calibrated);
  // Noise that hides the slope.
  EXPECT_FALSE(FitLatency({{10, 5}, {100, 1}, {200, 9}, {300, 2}}).calibrated);
  // A slope too small to judge: 300 tokens in 0.3 ms.
  const LatencyModel tiny =
      FitLatency({{10, 1.0}, {100, 1.1}, {200, 1.2}, {300, 1.3}});
  EXPECT_FALSE(tiny.calibrated);
  EXPECT_NE(tiny.failure.find("too little"), std::string::npos) << tiny.failure;
}

}  // namespace
}  // namespace kvcanary::auditor
