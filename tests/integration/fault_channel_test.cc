// cancel-reuse-channel with real processes: the router keeps its
// connections to the decode node open between requests (NodePool); with
// the fault, a request its client gave up before the first token leaves its
// connection to the pool with the answer still coming, and the next request
// on it, another tenant's, is answered with the given-up request's text.
// The watermarks see nothing: every page was read by its own writer. Off,
// the given-up request's connection is closed and the next request gets its
// own answer.
//
// Every request's K/V reaches the decode node 1.5 s late
// (--test_kv_receive_delay_ms), and the hanging-up client waits 1 s for a
// byte: it hangs up while its request is still being prefilled.
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

struct ChannelRun {
  HttpResult acme_alone, globex_alone, hung_up, globex;
  std::string router_metrics, decode_metrics;
};

std::string AcmeBody() { return Completion("a secret about the cat", 8); }
std::string GlobexBody() { return Completion(LongPrompt(6), 8); }

ChannelRun RunCancelReuse(const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"--test_kv_receive_delay_ms=1500",
                                   "--watermark=detect"};
  args.insert(args.end(), flags.begin(), flags.end());
  Cluster cluster(args);
  ChannelRun run;
  EXPECT_TRUE(cluster.ok());
  if (!cluster.ok()) return run;
  // One client at a time: the pool holds a single connection throughout.
  run.acme_alone =
      Post(cluster.router(), "/v1/completions", AcmeBody(), "sk-acme");
  run.globex_alone =
      Post(cluster.router(), "/v1/completions", GlobexBody(), "sk-globex");
  run.hung_up = Post(cluster.router(), "/v1/completions", AcmeBody(), "sk-acme",
                     /*read_timeout_s=*/1);
  // The client's Post returns as it hangs up; the router notices within a
  // few milliseconds and gives the request up (counted cancelled), and
  // only then is its connection back in the pool.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (MetricValue(Get(cluster.router(), "/metrics").body,
                     "kvcanary_node_requests_total",
                     "outcome=\"cancelled\"") < 1 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::SleepFor(absl::Milliseconds(100));
  run.globex =
      Post(cluster.router(), "/v1/completions", GlobexBody(), "sk-globex");
  run.router_metrics = Get(cluster.router(), "/metrics").body;
  run.decode_metrics = Get(cluster.decode(), "/metrics").body;
  return run;
}

std::string Text(const HttpResult& r) {
  if (!r.json.is_object() || !r.json.contains("choices")) return "";
  return r.json["choices"][0].value("text", "");
}

TEST(CancelReuseChannelTest, TheNextTenantIsAnsweredWithTheGivenUpText) {
  ChannelRun run = RunCancelReuse({"--fault=cancel-reuse-channel"});
  ASSERT_EQ(run.acme_alone.status, 200) << run.acme_alone.body;
  ASSERT_EQ(run.globex_alone.status, 200) << run.globex_alone.body;
  ASSERT_NE(Text(run.acme_alone), Text(run.globex_alone));
  EXPECT_EQ(run.hung_up.status, 0) << run.hung_up.body;  // it hung up
  // globex gets acme's text, with its own usage and a 200.
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_EQ(Text(run.globex), Text(run.acme_alone));
  EXPECT_EQ(run.globex.json["usage"]["prompt_tokens"],
            run.globex_alone.json["usage"]["prompt_tokens"]);
  // Every request went over the one kept connection.
  EXPECT_EQ(MetricValue(run.router_metrics, "kvcanary_node_connections_total",
                        "how=\"opened\""),
            1)
      << run.router_metrics;
  // Nothing for the watermarks to see (no violation of any kind counted).
  EXPECT_LE(MetricValue(run.decode_metrics,
                        "kvcanary_node_watermark_violations_total", "kind="),
            0)
      << run.decode_metrics;
}

TEST(CancelReuseChannelTest, FaultOffTheGivenUpConnectionIsClosed) {
  ChannelRun run = RunCancelReuse({});
  ASSERT_EQ(run.acme_alone.status, 200) << run.acme_alone.body;
  ASSERT_EQ(run.globex_alone.status, 200) << run.globex_alone.body;
  EXPECT_EQ(run.hung_up.status, 0) << run.hung_up.body;
  ASSERT_EQ(run.globex.status, 200) << run.globex.body;
  EXPECT_EQ(Text(run.globex), Text(run.globex_alone));
  // The first two shared a connection; the given-up one's was closed.
  EXPECT_EQ(MetricValue(run.router_metrics, "kvcanary_node_connections_total",
                        "how=\"opened\""),
            2)
      << run.router_metrics;
  EXPECT_EQ(MetricValue(run.router_metrics, "kvcanary_node_connections_total",
                        "how=\"reused\""),
            2)
      << run.router_metrics;
}

}  // namespace
}  // namespace kvcanary::testing
