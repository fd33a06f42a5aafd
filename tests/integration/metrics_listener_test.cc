// /metrics on a listener of its own (--metrics-port): the scraper reaches
// the metrics without reaching the node's API, and the API listener no
// longer serves them.
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

// The value of `key=` in a ready line; -1 if absent.
int Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  return at == std::string::npos ? -1
                                 : std::stoi(line.substr(at + key.size() + 2));
}

TEST(MetricsListenerTest, EachRoleCanServeItsMetricsOnAPortOfItsOwn) {
  const std::string secret = "--internal_secret_file=" + WriteSecretFile();
  const int kv = FreePort();
  Process prefill({"serve", "--role=prefill", secret, "--metrics_port=0",
                   "--decode_kv=decode-0=127.0.0.1:" + std::to_string(kv)});
  const std::string ready = prefill.ReadLine();
  const int http = Field(ready, "http"), metrics = Field(ready, "metrics");
  ASSERT_GT(http, 0) << ready;
  ASSERT_GT(metrics, 0) << ready;
  ASSERT_NE(http, metrics);
  const std::string api = "http://127.0.0.1:" + std::to_string(http);
  const std::string scrape = "http://127.0.0.1:" + std::to_string(metrics);
  HttpResult m = Get(scrape, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("kvcanary_node_kv_pages"), std::string::npos);
  EXPECT_EQ(Get(scrape, "/health").status, 200);
  // The API listener keeps /health, but not /metrics; the metrics listener
  // serves nothing of the API.
  EXPECT_EQ(Get(api, "/metrics").status, 404);
  EXPECT_EQ(Get(api, "/health").status, 200);
  EXPECT_EQ(Get(scrape, "/internal/v1/limits").status, 404);
  EXPECT_EQ(Get(scrape, "/v1/trace").status, 404);
}

TEST(MetricsListenerTest, WithoutTheFlagTheMetricsStayOnTheNodesPort) {
  const std::string secret = "--internal_secret_file=" + WriteSecretFile();
  Process prefill(
      {"serve", "--role=prefill", secret, "--decode_kv=decode-0=127.0.0.1:1"});
  const std::string ready = prefill.ReadLine();
  EXPECT_EQ(Field(ready, "metrics"), -1) << ready;
  const std::string api =
      "http://127.0.0.1:" + std::to_string(Field(ready, "http"));
  EXPECT_EQ(Get(api, "/metrics").status, 200);
}

}  // namespace
}  // namespace kvcanary::testing
