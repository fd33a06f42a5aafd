// A campaign against an endpoint we did not write: a small OpenAI-style
// server (cpp-httplib) whose golden answers are not deterministic even
// alone, like many real servers. The golden detector must fall back to
// comparing divergence rates under cross-tenant vs same-tenant load.
#include "auditor/campaign.h"

#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "auditor/detectors.h"
#include "canaries/templates.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// Golden prompts get "A" or "B": the second call alone always "B" (so the
// auditor sees the target is not deterministic), then "B" with probability
// p_same while only one API key is in the last 16 requests, p_cross when
// more are.
class FakeTarget {
 public:
  FakeTarget(double p_same, double p_cross)
      : p_same_(p_same), p_cross_(p_cross) {
    server_.Get("/v1/models",
                [](const httplib::Request&, httplib::Response& res) {
                  res.set_content(R"({"object":"list","data":[{"id":"fake"}]})",
                                  "application/json");
                });
    server_.Post("/v1/completions", [this](const httplib::Request& req,
                                           httplib::Response& res) {
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
          if (prompt != canaries::GoldenPrompt(v)) continue;
          const int call = calls_[v]++;
          const double p = cross ? p_cross_ : p_same_;
          const bool b = call == 1 || (call > 1 && coin_(rng_) < p);
          text = b ? " B" : " A";
        }
      }
      json out = {{"object", "text_completion"},
                  {"choices", {{{"index", 0}, {"text", text}}}},
                  {"usage", {{"prompt_tokens", 7}, {"completion_tokens", 8}}}};
      res.set_content(out.dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeTarget() {
    server_.stop();
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  const double p_same_, p_cross_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::deque<std::string> recent_;
  int calls_[3] = {0, 0, 0};
  std::mt19937 rng_{5};
  std::uniform_real_distribution<double> coin_{0, 1};
};

CampaignOptions Options(const std::string& target, const std::string& db) {
  CampaignOptions o;
  o.target = target;
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}, {"initech", "sk-i"}};
  o.db_path = db;
  o.max_probes = 480;
  o.duration = absl::Seconds(60);
  o.concurrency = 4;
  o.progress = false;
  return o;
}

std::string Db(const std::string& name) {
  return ::testing::TempDir() + "/kvcanary-campaign-" +
         std::to_string(getpid()) + "-" + name + ".db";
}

TEST(GoldenRateTest, JudgesOnlyASignificantRiseOverTheBaseline) {
  EXPECT_TRUE(JudgeGoldenRates(2, 40, 20, 40).has_value());
  EXPECT_FALSE(JudgeGoldenRates(4, 40, 6, 40).has_value());   // noise
  EXPECT_FALSE(JudgeGoldenRates(0, 5, 5, 5).has_value());     // too few
  EXPECT_FALSE(JudgeGoldenRates(20, 40, 2, 40).has_value());  // a drop
}

TEST(CampaignTest, NondeterministicTargetWithEqualRatesIsClean) {
  FakeTarget target(0.1, 0.1);
  AuditorMetrics metrics;
  auto r = RunCampaign(Options(target.url(), Db("equal")), &metrics);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->detectors["golden"].find("by divergence rate"),
            std::string::npos)
      << r->detectors["golden"];
  EXPECT_TRUE(r->findings.empty()) << FindingsTable(r->findings);
}

TEST(CampaignTest, DivergenceRisingUnderCrossTenantLoadIsAFinding) {
  FakeTarget target(0.05, 0.6);
  AuditorMetrics metrics;
  auto r = RunCampaign(Options(target.url(), Db("rising")), &metrics);
  ASSERT_TRUE(r.ok()) << r.status();
  bool found = false;
  for (const Finding& f : r->findings) {
    found = found || f.kind == "golden_divergence_rate";
  }
  EXPECT_TRUE(found) << FindingsTable(r->findings);
}

TEST(CampaignTest, APositiveControlRunsFirstAndAllPass) {
  for (const auto& [detector, fired] : RunPositiveControls()) {
    EXPECT_TRUE(fired) << detector;
  }
}

}  // namespace
}  // namespace kvcanary::auditor
