// One address taking an HTTP listener's connection cap (docs/nodes.md,
// "HTTP listeners"): 1,100 silent sockets from 127.0.0.2, each reopened as
// soon as it is closed, against the router or the decode node of
// `kvcanary-engine up`, while tenants on 127.0.0.1 send completions. Before the
// per-address rule, 120 of 122 such requests got 503 "too many connections".
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/attack/flood.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr int kSilentSockets = 1100;

int PortOf(const std::string& url) {
  return std::stoi(url.substr(url.rfind(':') + 1));
}

// The listener flooded: the router's, or a node's (which the router and
// the other node call, keep-alive connections and all).
class HttpFloodTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HttpFloodTest, OneAddressHolding1100SocketsDoesNotStarveTheTenants) {
  const std::string role = GetParam();
  // The flood's sockets here, and the router's 1,024 plus its own there.
  ASSERT_GE(RaiseOpenFilesLimit(4096), 2 * kSilentSockets)
      << "the open-files limit is too low for this test";
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::string target = role == "router"   ? cluster.router()
                             : role == "decode" ? cluster.decode()
                                                : cluster.prefill();
  SocketFlood flood("127.0.0.2", PortOf(target), kSilentSockets);
  flood.Start();
  // Until the router is full: its cap is 1,024.
  for (int i = 0; i < 200 && flood.held() < 1024; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::SleepFor(absl::Milliseconds(500));
  std::atomic<int> ok{0}, sent{0};
  std::mutex failed_mu;
  std::vector<std::string> failed;  // the first few failures' answers
  std::vector<std::thread> tenants;
  const absl::Time end = absl::Now() + absl::Seconds(12);
  for (const char* key : {"sk-acme", "sk-globex", "sk-initech"}) {
    tenants.emplace_back([&, key] {
      while (absl::Now() < end) {
        HttpResult r = Post(cluster.router(), "/v1/completions",
                            Completion("once upon a time", 4), key, 30);
        sent.fetch_add(1);
        if (r.status == 200) {
          ok.fetch_add(1);
        } else {
          std::lock_guard<std::mutex> lock(failed_mu);
          if (failed.size() < 3) {
            failed.push_back(std::to_string(r.status) + " " + r.body);
          }
        }
      }
    });
  }
  for (std::thread& t : tenants) t.join();
  const std::string metrics = Get(target, "/metrics").body;
  flood.Stop();
  std::printf(
      "tenants' completions served while 127.0.0.2 held %d sockets to the "
      "%s (%llu opened): %d of %d\n",
      kSilentSockets, role.c_str(),
      static_cast<unsigned long long>(flood.opened()), ok.load(), sent.load());
  ASSERT_GT(sent.load(), 30);
  EXPECT_GE(ok.load(), 0.99 * sent.load());
  for (const std::string& f : failed) std::printf("failed: %s\n", f.c_str());
  // The flood did fill the cap: its connections were closed to make room,
  // and its own new ones refused.
  EXPECT_GT(
      MetricValue(metrics, "kvcanary_http_connections_closed_for_room_total",
                  "first request"),
      0)
      << metrics;
  EXPECT_GT(MetricValue(metrics, "kvcanary_http_connections_refused_total",
                        "address over its share"),
            0);
}

INSTANTIATE_TEST_SUITE_P(Listeners, HttpFloodTest,
                         ::testing::Values("router", "decode"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvcanary::testing
