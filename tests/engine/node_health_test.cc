// The router's view of its nodes, against real HTTP servers on loopback: a
// role with no node answering is refused naming it, served again as soon as
// a node answers, and `up`'s status file shows in /health and /metrics.
#include "engine/nodes/node_health.h"

#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "engine/nodes/node_common.h"
#include "engine/nodes/supervisor_status.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

// A node's GET /health on `port` (0: any).
class FakeNode {
 public:
  explicit FakeNode(int port = 0) {
    server_ = MakeHttpServer(4);
    server_->Get("/health", [](const http::Request&, http::Response& r) {
      r.set_content("{\"status\":\"ok\"}", "application/json");
    });
    auto bound = BindAndServe(server_.get(), "127.0.0.1", port);
    EXPECT_TRUE(bound.ok()) << bound.status();
    port_ = bound.ok() ? *bound : 0;
  }
  ~FakeNode() { server_->Stop(); }
  int port() const { return port_; }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  std::unique_ptr<http::Server> server_;
  int port_ = 0;
};

NodeHealthOptions Options(std::vector<std::string> prefill,
                          std::vector<std::string> decode) {
  NodeHealthOptions o;
  o.prefill_urls = std::move(prefill);
  o.decode_urls = std::move(decode);
  o.probe_interval = absl::Milliseconds(50);
  return o;
}

// Polls until /health shows node `index` in `state` (or gives up).
bool EventuallyState(const NodeHealth& health, size_t index,
                     const std::string& state) {
  for (int i = 0; i < 200; ++i) {
    auto j = nlohmann::json::parse(health.HealthJson(/*detailed=*/true));
    if (j["nodes"][index]["state"] == state) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(NodeHealthTest, MissingRoleIsUnavailableUntilItsNodeAnswersAgain) {
  FakeNode prefill;
  auto decode = std::make_unique<FakeNode>();
  const int decode_port = decode->port();
  const std::string decode_url = decode->url();
  NodeHealth health(Options({prefill.url()}, {decode_url}));
  health.Start();
  auto route = health.Pick(0);
  ASSERT_TRUE(route.ok()) << route.status();
  EXPECT_EQ(route->prefill_url, prefill.url());
  EXPECT_EQ(route->decode_url, decode_url);

  decode.reset();
  // The prober notices within a few intervals (until then a request finds
  // the closed port itself: also a 503).
  EXPECT_TRUE(EventuallyState(health, 1, "down"));
  auto refused = health.Pick(1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(refused.status().message().find("decode node"),
            absl::string_view::npos)
      << refused.status();
  // The 503 goes to any tenant: the role and a count, no address.
  EXPECT_NE(refused.status().message().find("(1 of 1 not answering)"),
            absl::string_view::npos)
      << refused.status();
  EXPECT_EQ(refused.status().message().find(decode_url),
            absl::string_view::npos);
  EXPECT_EQ(refused.status().message().find("127.0.0.1"),
            absl::string_view::npos);
  auto j = nlohmann::json::parse(health.HealthJson(/*detailed=*/true));
  EXPECT_EQ(j["status"], "degraded") << j;
  EXPECT_EQ(j["role"], "router");
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_EQ(j["nodes"][0]["state"], "up");
  EXPECT_EQ(j["nodes"][1]["role"], "decode");
  EXPECT_EQ(j["nodes"][1]["node"], 0);
  EXPECT_EQ(j["nodes"][1]["url"], decode_url);
  EXPECT_EQ(j["nodes"][1]["state"], "down");
  EXPECT_TRUE(j["nodes"][1].contains("down_ms"));
  EXPECT_FALSE(j.contains("supervisor"));
  // Without the admin token: up or not per role, and no address.
  const std::string open = health.HealthJson(/*detailed=*/false);
  auto o = nlohmann::json::parse(open);
  EXPECT_EQ(o["status"], "degraded");
  EXPECT_EQ(o["roles"]["prefill"], "up") << o;
  EXPECT_EQ(o["roles"]["decode"], "down");
  EXPECT_FALSE(o.contains("nodes"));
  EXPECT_EQ(open.find(decode_url), std::string::npos) << open;
  // /metrics is open too: the node's index within its role, no address.
  const std::string metrics = health.MetricsText();
  EXPECT_NE(
      metrics.find("kvcanary_router_node_up{node=\"0\",role=\"decode\"} 0"),
      std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find(decode_url), std::string::npos) << metrics;

  // Back on the same port: served at the next pick (which asks the node
  // itself rather than wait for the prober), no restart of anything.
  decode = std::make_unique<FakeNode>(decode_port);
  ASSERT_EQ(decode->port(), decode_port);
  EXPECT_TRUE(health.Pick(2).ok());
  EXPECT_EQ(
      nlohmann::json::parse(health.HealthJson(/*detailed=*/true))["status"],
      "ok");
}

TEST(NodeHealthTest, PicksSkipANodeThatIsDown) {
  FakeNode prefill, decode_a;
  auto decode_b = std::make_unique<FakeNode>();
  NodeHealth health(
      Options({prefill.url()}, {decode_a.url(), decode_b->url()}));
  health.Start();
  EXPECT_EQ(health.Pick(1)->decode_url, decode_b->url());
  decode_b.reset();
  // Once the prober has seen it go, every pick lands on the other.
  EXPECT_TRUE(EventuallyState(health, 2, "down"));
  for (uint64_t n = 0; n < 4; ++n) {
    auto route = health.Pick(n);
    ASSERT_TRUE(route.ok()) << route.status();
    EXPECT_EQ(route->decode_url, decode_a.url());
  }
  // Some node of each role is up: not degraded.
  EXPECT_EQ(
      nlohmann::json::parse(health.HealthJson(/*detailed=*/true))["status"],
      "ok");
}

TEST(NodeHealthTest, ServesUpsStatusFile) {
  FakeNode prefill, decode;
  const std::string path = ::testing::TempDir() + "/node-health-up-" +
                           std::to_string(getpid()) + ".json";
  SupervisorStatus s;
  s.pid = 10;
  s.roles.push_back({"prefill", "up", 11, prefill.port(), 0, std::nullopt});
  s.roles.push_back({"decode", "restarting", 0, decode.port(), 2, "signal 9"});
  s.roles.push_back({"router", "up", 13, 8000, 1, "code 1"});
  ASSERT_TRUE(s.WriteFile(path).ok());
  NodeHealthOptions o = Options({prefill.url()}, {decode.url()});
  o.up_status_file = path;
  NodeHealth health(o);
  health.Start();
  auto j = nlohmann::json::parse(health.HealthJson(/*detailed=*/true));
  ASSERT_TRUE(j.contains("supervisor")) << j;
  EXPECT_EQ(j["supervisor"]["pid"], 10);
  ASSERT_EQ(j["supervisor"]["roles"].size(), 3u);
  EXPECT_EQ(j["supervisor"]["roles"][1]["state"], "restarting");
  EXPECT_EQ(j["supervisor"]["roles"][1]["restarts"], 2);
  EXPECT_EQ(j["supervisor"]["roles"][1]["last_exit"], "signal 9");
  // The PIDs are the admin token's to see.
  EXPECT_FALSE(nlohmann::json::parse(health.HealthJson(/*detailed=*/false))
                   .contains("supervisor"));
  const std::string metrics = health.MetricsText();
  EXPECT_NE(metrics.find("kvcanary_engine_restarts_total{role=\"decode\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("kvcanary_engine_restarts_total{role=\"router\"} 1"),
            std::string::npos);
  // The counter follows the file.
  s.roles[1].restarts = 3;
  ASSERT_TRUE(s.WriteFile(path).ok());
  EXPECT_NE(health.MetricsText().find(
                "kvcanary_engine_restarts_total{role=\"decode\"} 3"),
            std::string::npos);
  std::remove(path.c_str());
  EXPECT_TRUE(
      nlohmann::json::parse(health.HealthJson(/*detailed=*/true))["supervisor"]
          .contains("error"));
}

TEST(NodeHealthTest, ErrorsForClientsNameNodesByRoleAndIndexNotAddress) {
  // Not started: no probe runs, the URLs are only names here.
  const NodeHealth health(
      Options({"http://127.0.0.1:4000"},
              {"http://127.0.0.1:4100", "https://127.0.0.1:41000/"}));
  absl::Status status = absl::UnavailableError(
      "decode node http://127.0.0.1:41000: prefill node "
      "http://127.0.0.1:4000: connection refused; decode-0 "
      "(127.0.0.1:4100, KV 127.0.0.1:40001) 127.0.0.1: done");
  status.SetPayload("kvcanary/openai-code", absl::Cord("x"));
  const absl::Status shown = health.Redacted(status);
  EXPECT_EQ(shown.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(shown.message(),
            "decode node decode-1: prefill node prefill-0: connection "
            "refused; decode-0 (decode-0, KV an internal address) 127.0.0.1: "
            "done");
  ASSERT_TRUE(shown.GetPayload("kvcanary/openai-code").has_value());
  EXPECT_TRUE(health.Redacted(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace kvcanary::engine
