// Failure paths of the disaggregated topology, with real processes.
#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

int PortOf(const std::string& url) {
  return std::stoi(url.substr(url.rfind(':') + 1));
}

// A node started with `serve`; its URL from the ready line.
struct Node {
  explicit Node(std::vector<std::string> args) : process(args) {
    const std::string ready = process.ReadLine();
    const size_t at = ready.find("http=");
    if (at != std::string::npos) {
      url =
          "http://127.0.0.1:" + std::to_string(std::stoi(ready.substr(at + 5)));
    }
  }
  Process process;
  std::string url;
};

// A hand-built topology's shared flags: one secret, and the decode nodes'
// KV ports chosen up front (the prefill node's configuration names them).
struct Topology {
  std::string secret = "--internal_secret_file=" + WriteSecretFile();
  std::string KvPeer(const std::string& name, int port) const {
    return name + "=127.0.0.1:" + std::to_string(port);
  }
};

TEST(FailureTest,
     DecodeKilledDuringTransferFailsTheRequestAndFreesPrefillPages) {
  const std::string tenants = WriteTenantsFile();
  Topology t;
  const int kv = FreePort();
  Node prefill({"serve", "--role=prefill", t.secret,
                "--decode_kv=" + t.KvPeer("decode-0", kv)});
  auto decode_args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"serve", "--role=decode", t.secret,
                                  "--prefill=" + prefill.url,
                                  "--kv_port=" + std::to_string(kv)};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto decode =
      std::make_unique<Node>(decode_args({"--test_kv_receive_delay_ms=3000"}));
  ASSERT_FALSE(prefill.url.empty());
  ASSERT_FALSE(decode->url.empty());
  const std::string decode_url = decode->url;
  Node router({"serve", "--role=router", "--tenants=" + tenants, t.secret,
               "--prefill=" + prefill.url, "--decode=" + decode_url});
  ASSERT_FALSE(router.url.empty());

  HttpResult result;
  std::thread client([&] {
    result = Post(router.url, "/v1/completions",
                  Completion("the transfer dies", 8), "sk-acme");
  });
  // The transfer is paused inside the decode node's receiver: kill it there.
  bool prefill_holds_pages = false;
  for (int i = 0; i < 100 && !prefill_holds_pages; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    prefill_holds_pages = UsedPages(prefill.url) > 0;
  }
  EXPECT_TRUE(prefill_holds_pages) << "the transfer never started";
  decode->process.Signal(SIGKILL);
  decode->process.Wait();
  client.join();
  EXPECT_NE(result.status, 200) << result.body;
  EXPECT_GE(result.status, 500) << result.body;
  EXPECT_TRUE(EventuallyNoPagesUsed(prefill.url))
      << "prefill kept the request's pages";

  // A decode node comes back on the same address: the router serves again.
  decode.reset();
  decode = std::make_unique<Node>(
      decode_args({"--port=" + std::to_string(PortOf(decode_url))}));
  ASSERT_EQ(decode->url, decode_url);
  HttpResult again = Post(router.url, "/v1/completions",
                          Completion("back again", 8), "sk-acme");
  EXPECT_EQ(again.status, 200) << again.body;
}

TEST(FailureTest, RouterSpreadsRequestsOverSeveralDecodeNodes) {
  const std::string tenants = WriteTenantsFile();
  Topology t;
  const int kv_a = FreePort(), kv_b = FreePort();
  Node prefill(
      {"serve", "--role=prefill", t.secret,
       "--decode_kv=" + t.KvPeer("a", kv_a) + "," + t.KvPeer("b", kv_b)});
  Node decode_a({"serve", "--role=decode", t.secret, "--name=a",
                 "--prefill=" + prefill.url,
                 "--kv_port=" + std::to_string(kv_a)});
  Node decode_b({"serve", "--role=decode", t.secret, "--name=b",
                 "--prefill=" + prefill.url,
                 "--kv_port=" + std::to_string(kv_b)});
  Node router({"serve", "--role=router", "--tenants=" + tenants, t.secret,
               "--prefill=" + prefill.url,
               "--decode=" + decode_a.url + "," + decode_b.url});
  ASSERT_FALSE(router.url.empty());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Post(router.url, "/v1/completions", Completion("round robin", 4),
                   "sk-acme")
                  .status,
              200);
  }
  for (const std::string& node : {decode_a.url, decode_b.url}) {
    EXPECT_EQ(MetricValue(Get(node, "/metrics").body,
                          "kvcanary_node_requests_total", "outcome=\"ok\""),
              2)
        << node;
  }
}

TEST(FailureTest, UnreachableDecodeNodeIs503) {
  const std::string tenants = WriteTenantsFile();
  Topology t;
  const int kv = FreePort();
  Node prefill({"serve", "--role=prefill", t.secret,
                "--decode_kv=" + t.KvPeer("decode-0", kv)});
  auto decode = std::make_unique<Node>(std::vector<std::string>{
      "serve", "--role=decode", t.secret, "--prefill=" + prefill.url,
      "--kv_port=" + std::to_string(kv)});
  Node router({"serve", "--role=router", "--tenants=" + tenants, t.secret,
               "--prefill=" + prefill.url, "--decode=" + decode->url});
  ASSERT_FALSE(router.url.empty());
  decode.reset();  // SIGTERM, gone
  HttpResult r = Post(router.url, "/v1/completions",
                      Completion("anyone there", 4), "sk-acme");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.json["error"]["type"], "server_error") << r.body;
}

TEST(FailureTest, FullQueuesAre429) {
  Cluster cluster({"--max_waiting=1"});
  ASSERT_TRUE(cluster.ok());
  std::vector<int> statuses(6);
  std::vector<std::string> bodies(6);
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      HttpResult r = Post(cluster.router(), "/v1/completions",
                          Completion("busy busy", 200), "sk-globex");
      statuses[i] = r.status;
      bodies[i] = r.body;
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0, too_many = 0;
  for (int i = 0; i < 6; ++i) {
    if (statuses[i] == 200) ++ok;
    if (statuses[i] == 429) {
      ++too_many;
      EXPECT_NE(bodies[i].find("rate_limit_error"), std::string::npos)
          << bodies[i];
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(too_many, 1);
  EXPECT_EQ(ok + too_many, 6);
  EXPECT_TRUE(EventuallyNoPagesUsed(cluster.decode()));
}

TEST(FailureTest, TenantOverItsConcurrencyLimitIs429OthersAreServed) {
  // Each transfer pauses 500 ms in the decode node, so requests overlap.
  Cluster cluster(std::vector<std::string>{"--test_kv_receive_delay_ms=500"},
                  R"({"tenants": [
      {"id": "small", "api_keys": ["sk-small"], "max_concurrent_requests": 1},
      {"id": "big", "api_keys": ["sk-big"]}]})");
  ASSERT_TRUE(cluster.ok());
  std::vector<int> small(4), big(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      small[i] = Post(cluster.router(), "/v1/completions", Completion("s", 150),
                      "sk-small")
                     .status;
    });
    threads.emplace_back([&, i] {
      big[i] = Post(cluster.router(), "/v1/completions", Completion("b", 150),
                    "sk-big")
                   .status;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(std::count(small.begin(), small.end(), 429), 1)
      << ::testing::PrintToString(small) << " "
      << ::testing::PrintToString(big);
  EXPECT_GE(std::count(small.begin(), small.end(), 200), 1);
  EXPECT_EQ(std::count(big.begin(), big.end(), 200), 4);
}

TEST(FailureTest, ClientDisconnectAbortsTheRequestOnTheNodes) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  EXPECT_GE(StreamAndHangUp(cluster.router()), 1);
  EXPECT_TRUE(EventuallyNoPagesUsed(cluster.decode()))
      << "decode kept decoding for nobody";
  EXPECT_TRUE(EventuallyNoPagesUsed(cluster.prefill()));
}

std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" +
                  std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; f >> c;) out.push_back(c);
  return out;
}

TEST(FailureTest, UpStopsEveryNodeOnSigterm) {
  auto cluster = std::make_unique<Cluster>(std::vector<std::string>{});
  ASSERT_TRUE(cluster->ok());
  const std::vector<pid_t> children = ChildrenOf(cluster->process().pid());
  EXPECT_EQ(children.size(), 3u);
  cluster->process().Signal(SIGTERM);
  EXPECT_EQ(cluster->process().Wait(), 0);
  for (pid_t c : children) {
    EXPECT_NE(access(("/proc/" + std::to_string(c)).c_str(), F_OK), 0)
        << "orphan " << c;
  }
}

}  // namespace
}  // namespace kvcanary::testing
