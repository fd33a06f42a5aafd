// A request whose client goes away before its answer ends is counted under
// its own outcome, "cancelled", in kvcanary_node_requests_total: on the
// router, and on the decode node (where the router's stream is dropped).
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

double Requests(const std::string& node, const std::string& outcome) {
  return MetricValue(Get(node, "/metrics").body, "kvcanary_node_requests_total",
                     "outcome=\"" + outcome + "\"");
}

// Polls until `node` counts `want` requests of `outcome` (or gives up).
bool EventuallyCounts(const std::string& node, const std::string& outcome,
                      double want) {
  for (int i = 0; i < 100; ++i) {
    if (Requests(node, outcome) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(CancelledTest, ClientDisconnectCountsAsCancelledOnRouterAndDecode) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  ASSERT_EQ(Post(cluster.router(), "/v1/completions", Completion("whole", 4),
                 "sk-acme")
                .status,
            200);
  EXPECT_GE(StreamAndHangUp(cluster.router()), 1);
  for (const std::string& node : {cluster.router(), cluster.decode()}) {
    SCOPED_TRACE(node);
    EXPECT_TRUE(EventuallyCounts(node, "cancelled", 1))
        << Get(node, "/metrics").body;
    EXPECT_EQ(Requests(node, "ok"), 1);  // the whole one only
  }
}

}  // namespace
}  // namespace kvcanary::testing
