// No fault switched on: thousands of requests from many tenants, with page
// reuse, mixed lengths, aborts and client disconnects, must produce zero
// watermark violations (watermarks in detect mode, so nothing is hidden by
// refusals).
#include <atomic>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr int kTenants = 8;
constexpr int kRequests = 2000;
constexpr int kClients = 16;

std::string EightTenants() {
  std::string json = R"({"tenants": [)";
  for (int t = 0; t < kTenants; ++t) {
    json += (t ? "," : "") + std::string(R"({"id": "t)") + std::to_string(t) +
            R"(", "api_keys": ["sk-t)" + std::to_string(t) + R"("]})";
  }
  return json + "]}";
}

// Streams the request and hangs up after the first chunk.
bool StreamAndDisconnect(const std::string& router, const std::string& key,
                         const std::string& body) {
  httplib::Client client(router);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Authorization", "Bearer " + key}};
  req.set_header("Content-Type", "application/json");
  req.body = body;
  bool got = false;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    got = true;
    return false;
  };
  client.send(req);
  return got;
}

TEST(SoakTest, TwoThousandRequestsFromEightTenantsHaveNoViolations) {
  Cluster cluster({"--watermark=detect", "--num_pages=320"}, EightTenants());
  ASSERT_TRUE(cluster.ok());
  std::atomic<int> next{0}, ok{0}, disconnected{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(1234 + c);
      while (true) {
        const int i = next.fetch_add(1);
        if (i >= kRequests) return;
        const std::string key = "sk-t" + std::to_string(i % kTenants);
        // Half the prompts start with the same long preamble, whatever the
        // tenant: the prefix cache must share it within a tenant only.
        std::string prompt;
        if (i % 2 == 0) {
          for (int w = 0; w < 5; ++w) prompt += "once there was a cat ";
        }
        prompt += "tenant " + std::to_string(i % kTenants) + " request " +
                  std::to_string(i);
        const int words = std::uniform_int_distribution<int>(0, 40)(rng);
        for (int w = 0; w < words; ++w) prompt += w % 3 ? " the dog" : " ran";
        nlohmann::json j;
        j["prompt"] = prompt;
        j["max_tokens"] = std::uniform_int_distribution<int>(1, 48)(rng);
        j["temperature"] = i % 4 == 0 ? 0.8 : 0.0;
        j["seed"] = i;
        if (i % 10 == 3) {  // a client that goes away mid-stream
          j["stream"] = true;
          j["max_tokens"] = 48;
          StreamAndDisconnect(cluster.router(), key, j.dump());
          ++disconnected;
          continue;
        }
        HttpResult r = Post(cluster.router(), "/v1/completions", j.dump(), key);
        if (r.status != 200 && failed.fetch_add(1) < 3) {
          ADD_FAILURE() << "request " << i << ": HTTP " << r.status << " "
                        << r.body;
        }
        if (r.status == 200) ++ok;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(ok.load() + disconnected.load(), kRequests);
  for (const std::string& node : {cluster.prefill(), cluster.decode()}) {
    std::string metrics;
    for (int i = 0; i < 100; ++i) {  // aborted requests finish asynchronously
      metrics = Get(node, "/metrics").body;
      if (MetricValue(metrics, "kvcanary_node_kv_pages", "state=\"used\"") == 0)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(MetricValue(metrics, "kvcanary_node_kv_pages", "state=\"used\""),
              0)
        << node;
    // The counter family has no series until the first violation.
    EXPECT_EQ(MetricValue(metrics, "kvcanary_node_watermark_violations_total",
                          "kind="),
              -1)
        << node << "\n"
        << metrics;
  }
  // The preamble was served from the prefix cache (within each tenant).
  EXPECT_GT(MetricValue(Get(cluster.prefill(), "/metrics").body,
                        "kvcanary_node_prefix_cache_hit_pages_total", "role"),
            0);
  // The decode node really served the requests it reports.
  EXPECT_GE(MetricValue(Get(cluster.decode(), "/metrics").body,
                        "kvcanary_node_requests_total", "outcome=\"ok\""),
            ok.load());
}

}  // namespace
}  // namespace kvcanary::testing
