// How golden and the log-probability detectors judge a target that is not
// deterministic: answers that move only under another key's load (found),
// figures noisy alone (judged by distance), a healthy server that is not
// batch-invariant (modes chosen under same-tenant load: clean), and a small
// server whose golden answers differ even alone (judged by rate).
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "auditor/campaign/campaign.h"
#include "auditor/detectors/golden.h"
#include "canaries/templates.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/auditor/campaign/campaign_fixtures.h"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;
using namespace campaign_fixtures;  // NOLINT: the fixtures of every test here

// A server whose greedy text never changes under load but whose
// log-probabilities move by 0.001 while another request is in flight (what
// a foreign page in attention does before it flips an argmax): text golden
// sees nothing, logprob_golden and prompt_logprobs do.
TEST(CampaignTest, LogprobsThatMoveUnderLoadAreFoundWhereTextIsNot) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  fo.busy_logprob_shift = 1e-3;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "logprob-shift"), &metrics);
  EXPECT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_GT(Count(r, "logprob_mismatch"), 0) << Explain(r);
  EXPECT_GT(Count(r, "prompt_logprobs_mismatch"), 0) << Explain(r);
  EXPECT_EQ(Count(r, "golden_mismatch"), 0) << Explain(r);
  const DetectorCoverage* d = CoverageOf(r, "logprob_golden");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->stats["mode"], "exact");
}

// Figures that differ a little even alone (a batch-dependent kernel):
// judged by distance against the same-tenant baseline, clean while the
// noise is all there is, a finding when load moves them further.
TEST(CampaignTest, LogprobsNoisyAloneAreJudgedByDistanceRates) {
  for (const double shift : {0.0, 0.5}) {
    SCOPED_TRACE(shift);
    FakeTargetOptions fo = Fake(Flavor::kVllm);
    fo.logprob_noise = 1e-4;
    fo.busy_logprob_shift = shift;
    FakeTarget target(fo);
    AuditorMetrics metrics;
    CampaignOptions o =
        Options(target.url(), absl::StrCat("logprob-noise-", shift));
    o.max_probes = 640;  // the baseline's slots are tenant 0's alone
    const CampaignResult r = RunCampaign(o, &metrics);
    const DetectorCoverage* d = CoverageOf(r, "logprob_golden");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->stats["mode"], "distance") << Explain(r);
    if (shift == 0) {
      EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
      EXPECT_EQ(d->state, DetectorState::kActive) << d->reason;
    } else {
      EXPECT_GT(Count(r, "logprob_distance_rate"), 0) << Explain(r);
    }
  }
}

// A healthy server that is not batch-invariant: answers alone are bitwise
// the same twice, and differ — deterministically per batch shape — under
// load. Calibration sends each golden variant under same-tenant load too,
// so golden is judged by rate and the log-probabilities by distance, with
// the baseline interleaved in time: clean, and each detector active or
// disabled as blind, saying so, never active and blind.
TEST(CampaignTest, ABatchVariantHealthyServerIsCleanWithGoldenJudgedByRate) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  fo.batch_variant = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "batch-variant");
  o.max_probes = 640;  // the baseline's slots are tenant 0's alone
  const CampaignResult r = RunCampaign(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  const DetectorCoverage* golden = CoverageOf(r, "golden");
  ASSERT_NE(golden, nullptr);
  EXPECT_GT(golden->stats["moved_under_load"].get<int>(), 0) << Explain(r);
  EXPECT_EQ(golden->stats["exact_variants"], 0) << Explain(r);
  // About half the answers under load differ: active where the counts
  // can see a rise of 30 points, else disabled as blind, saying so.
  if (golden->state != DetectorState::kActive) {
    EXPECT_NE(golden->disabled.find("blind on this target"), std::string::npos)
        << golden->reason;
  }
  for (const char* name : {"logprob_golden", "prompt_logprobs"}) {
    const DetectorCoverage* d = CoverageOf(r, name);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->stats["mode"], "distance") << name << Explain(r);
    EXPECT_GT(d->stats["moved_under_load"].get<int>(), 0) << name;
    // Scored prompts are few: active, or disabled as blind at their count.
    if (d->state != DetectorState::kActive) {
      EXPECT_EQ(std::string(name), "prompt_logprobs") << d->reason;
      EXPECT_NE(d->disabled.find("blind on this target"), std::string::npos)
          << d->reason;
    }
  }
}

// Golden answers that differ even alone (many servers are not
// batch-invariant): judged by rate, cross-tenant vs same-tenant load.
//
// Golden prompts get "A" or "B": the second call alone always "B" (so the
// auditor sees the target is not deterministic), then "B" with probability
// p_same while only one API key is in the last 16 requests, p_cross when
// more are.
class NondeterministicTarget {
 public:
  NondeterministicTarget(double p_same, double p_cross)
      : p_same_(p_same), p_cross_(p_cross) {
    server_.Get("/v1/models", [](const http::Request&, http::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake"}]})",
                      "application/json");
    });
    server_.Post("/v1/completions", [this](const http::Request& req,
                                           http::Response& res) {
      const json body = json::parse(req.body);
      const std::string prompt = body["prompt"];
      std::string text = " once upon a time there was a cat";
      {
        std::lock_guard<std::mutex> lock(mu_);
        recent_.push_back(req.get_header_value("Authorization"));
        if (recent_.size() > 16) recent_.pop_front();
        const bool cross =
            std::set<std::string>(recent_.begin(), recent_.end()).size() > 1;
        for (int v = 0; v < 3; ++v) {
          if (prompt.find(canaries::GoldenPrompt(v)) == std::string::npos) {
            continue;
          }
          const int call = calls_[v]++;
          const double p = cross ? p_cross_ : p_same_;
          const bool b = call == 1 || (call > 1 && coin_(rng_) < p);
          text = b ? " B" : " A";
        }
      }
      json out = {{"object", "text_completion"},
                  {"choices", {{{"index", 0}, {"text", text}}}},
                  {"usage",
                   {{"prompt_tokens", testing::FakeTokenCount(prompt)},
                    {"completion_tokens", 8}}}};
      res.set_content(out.dump(), "application/json");
    });
    port_ = server_.Bind("127.0.0.1", 0).value();
    server_.Start();
  }
  ~NondeterministicTarget() { server_.Stop(); }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  const double p_same_, p_cross_;
  http::Server server_;
  int port_ = 0;
  std::mutex mu_;
  std::deque<std::string> recent_;
  int calls_[3] = {0, 0, 0};
  std::mt19937 rng_{5};
  std::uniform_real_distribution<double> coin_{0, 1};
};

CampaignOptions RateOptions(const std::string& target,
                            const std::string& name) {
  CampaignOptions o = Options(target, name);
  o.max_probes = 480;
  o.max_prompt_tokens = 512;
  return o;
}

TEST(GoldenRateTest, JudgesOnlyASignificantRiseOverTheBaseline) {
  EXPECT_TRUE(JudgeGoldenRates(2, 40, 20, 40).has_value());
  EXPECT_FALSE(JudgeGoldenRates(4, 40, 6, 40).has_value());   // noise
  EXPECT_FALSE(JudgeGoldenRates(0, 5, 5, 5).has_value());     // too few
  EXPECT_FALSE(JudgeGoldenRates(20, 40, 2, 40).has_value());  // a drop
}

TEST(GoldenRateTest, NondeterministicTargetWithEqualRatesHasNoGoldenFinding) {
  NondeterministicTarget target(0.1, 0.1);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(RateOptions(target.url(), "equal"), &metrics);
  const DetectorCoverage* golden = CoverageOf(r, "golden");
  ASSERT_NE(golden, nullptr) << Explain(r);
  ASSERT_FALSE(golden->notes.empty());
  EXPECT_NE(golden->notes[0].find("rate mode"), std::string::npos);
  EXPECT_EQ(Count(r, "golden_divergence_rate"), 0) << Explain(r);
  EXPECT_EQ(Count(r, "golden_mismatch"), 0);
}

TEST(GoldenRateTest, DivergenceRisingUnderCrossTenantLoadIsAFinding) {
  NondeterministicTarget target(0.05, 0.6);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(RateOptions(target.url(), "rising"), &metrics);
  EXPECT_EQ(Count(r, "golden_divergence_rate"), 1) << Explain(r);
  EXPECT_EQ(r.verdict, Verdict::kFindings);
}

}  // namespace
}  // namespace kvcanary::auditor
