// `kvcanary-engine up` supervising its children, with real processes: a
// child killed with SIGKILL under load is restarted on its ports while the
// others keep serving (same pids), service returns within a bound, the decode
// node ends with no page in use, and every answer served is the one a
// fixed-seed request gave before the kill (no request was answered from
// another's KV). And the router, with single `serve` nodes: a missing role is
// a 503 naming it, served again as soon as the node is back.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t)
      .count();
}

// The requests of the load: greedy and fixed-seed sampled, one over several
// KV pages.
std::vector<std::string> Asks() {
  auto sampled = [](const std::string& prompt, int max_tokens, double t,
                    uint64_t seed) {
    nlohmann::json j;
    j["prompt"] = prompt;
    j["max_tokens"] = max_tokens;
    j["temperature"] = t;
    j["seed"] = seed;
    return j.dump();
  };
  return {Completion("once upon a time", 12),
          sampled("the cat sat on the", 12, 0.9, 1234),
          sampled(LongPrompt(30), 8, 0.7, 99)};
}

std::string TextOf(const HttpResult& r) {
  if (r.status != 200 || !r.json.is_object()) return "";
  return r.json["choices"][0]["text"].get<std::string>();
}

// A few clients posting the asks in a loop until Stop().
class Load {
 public:
  struct Answer {
    size_t ask;
    int status;
    std::string text;
    std::string body;
    uint64_t id;  // 0: none
  };
  Load(const std::string& router, int clients) {
    const std::vector<std::string> asks = Asks();
    for (int c = 0; c < clients; ++c) {
      threads_.emplace_back([this, router, asks, c] {
        for (size_t i = c; !stop_.load(); ++i) {
          const size_t ask = i % asks.size();
          HttpResult r = Post(router, "/v1/completions", asks[ask], "sk-acme");
          const std::string id = r.Header("X-Kvcanary-Request-Id");
          {
            std::lock_guard<std::mutex> lock(mu_);
            answers_.push_back({ask, r.status, TextOf(r), r.body,
                                id.empty() ? 0 : std::stoull(id)});
          }
          if (r.status != 200) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }
      });
    }
  }
  std::vector<Answer> Stop() {
    stop_ = true;
    for (auto& t : threads_) t.join();
    threads_.clear();
    return answers_;
  }
  ~Load() { Stop(); }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::vector<Answer> answers_;
};

// Reads `up`'s stdout until a line starting with `prefix` (or gives up).
std::string LineStartingWith(Process& up, const std::string& prefix,
                             std::vector<std::string>* seen) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    const std::string line = up.ReadLine(1000);
    if (line.empty()) continue;
    seen->push_back(line);
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

// The value of `key=` in an output line like "restarted role=decode pid=7".
std::string Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 2;
  return line.substr(start, line.find(' ', start) - start);
}

class SupervisionTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SupervisionTest, KilledChildIsRestartedAndServiceReturns) {
  const std::string role = GetParam();
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::map<std::string, int64_t> before = RolePids(cluster);
  ASSERT_EQ(before.size(), 3u) << AdminHealth(cluster).body;

  // What each ask answers before anything is killed.
  const std::vector<std::string> asks = Asks();
  std::vector<std::string> expected;
  uint64_t first_id = 0;
  for (const std::string& ask : asks) {
    HttpResult r = Post(cluster.router(), "/v1/completions", ask, "sk-acme");
    ASSERT_EQ(r.status, 200) << r.body;
    expected.push_back(TextOf(r));
    first_id = std::stoull(r.Header("X-Kvcanary-Request-Id"));
  }

  Load load(cluster.router(), 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(static_cast<pid_t>(before.at(role)), SIGKILL), 0);

  std::vector<std::string> lines;
  const std::string restarted =
      LineStartingWith(cluster.process(), "restarted role=" + role, &lines);
  ASSERT_FALSE(restarted.empty()) << ::testing::PrintToString(lines);
  const int64_t restart_ms = MsSince(killed_at);
  EXPECT_EQ(lines.front(), "exited role=" + role +
                               " pid=" + std::to_string(before.at(role)) +
                               " exit=signal 9 restart_in_ms=100")
      << ::testing::PrintToString(lines);
  EXPECT_EQ(Field(restarted, "restarts"), "1") << restarted;
  const int64_t new_pid = std::stoll(Field(restarted, "pid"));
  EXPECT_NE(new_pid, before.at(role));

  // Service returns: a request succeeds again within a bound.
  int64_t back_ms = -1;
  while (MsSince(killed_at) < 30000) {
    if (Post(cluster.router(), "/v1/completions", asks[0], "sk-acme").status ==
        200) {
      back_ms = MsSince(killed_at);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(back_ms, 0) << "no request succeeded within 30 s of the kill";
  RecordProperty("restart_ms", std::to_string(restart_ms));
  RecordProperty("served_again_ms", std::to_string(back_ms));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const std::vector<Load::Answer> answers = load.Stop();
  std::map<int, int> statuses;
  for (const Load::Answer& a : answers) ++statuses[a.status];
  std::printf(
      "kill -9 %s: restarted after %lld ms (%s), served again after %lld ms; "
      "load answers by status: %s\n",
      role.c_str(), static_cast<long long>(restart_ms), restarted.c_str(),
      static_cast<long long>(back_ms),
      ::testing::PrintToString(statuses).c_str());

  // Every answer served is the one its ask gave before; every failure is a
  // 503 naming a role (or, while the router itself is down, no answer).
  int served_after = 0;
  std::set<uint64_t> ids;
  for (const Load::Answer& a : answers) {
    if (a.id != 0) {
      EXPECT_TRUE(ids.insert(a.id).second) << "id reused " << a.id;
    }
    if (a.status == 200) {
      EXPECT_EQ(a.text, expected[a.ask]) << "ask " << a.ask;
      ++served_after;
      continue;
    }
    if (a.status == 0 && role == "router") continue;
    EXPECT_EQ(a.status, 503) << a.body;
    auto j = nlohmann::json::parse(a.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << a.body;
    EXPECT_EQ(j["error"]["type"], "server_error");
    const std::string message = j["error"]["message"].get<std::string>();
    EXPECT_TRUE(message.find("prefill") != std::string::npos ||
                message.find("decode") != std::string::npos)
        << message;
  }
  EXPECT_GT(served_after, 0);

  // The others were not restarted; the restarted one is reported.
  const std::map<std::string, int64_t> after = RolePids(cluster);
  for (const auto& [r, pid] : before) {
    if (r == role) {
      EXPECT_EQ(after.at(r), new_pid);
    } else {
      EXPECT_EQ(after.at(r), pid) << r << " was restarted";
      EXPECT_EQ(kill(static_cast<pid_t>(pid), 0), 0) << r;
    }
  }
  HttpResult health = AdminHealth(cluster);
  EXPECT_EQ(health.json["status"], "ok") << health.body;
  for (const auto& r : health.json["supervisor"]["roles"]) {
    EXPECT_EQ(r["state"], "up") << health.body;
    EXPECT_EQ(r["restarts"], r["role"] == role ? 1 : 0) << health.body;
  }
  const std::string metrics = Get(cluster.router(), "/metrics").body;
  for (const char* r : {"prefill", "decode", "router"}) {
    EXPECT_EQ(MetricValue(metrics, "kvcanary_engine_restarts_total",
                          "role=\"" + std::string(r) + "\""),
              r == role ? 1 : 0)
        << r;
  }
  // A restarted router gives out ids of another epoch: none is reused.
  if (role == "router") {
    HttpResult r =
        Post(cluster.router(), "/v1/completions", asks[0], "sk-acme");
    const uint64_t id = std::stoull(r.Header("X-Kvcanary-Request-Id"));
    EXPECT_NE(id >> 40, first_id >> 40);
    EXPECT_EQ(ids.count(id), 0u);
  }

  // Nothing held on the decode node, and no watermark violation anywhere.
  EXPECT_TRUE(EventuallyNoPagesUsed(cluster.decode()))
      << "pages in use: " << UsedPages(cluster.decode());
  for (const std::string& node : {cluster.prefill(), cluster.decode()}) {
    EXPECT_LE(MetricValue(Get(node, "/metrics").body,
                          "kvcanary_node_watermark_violations_total", ""),
              0)
        << node;
  }
  // And `up` still stops everything cleanly.
  cluster.process().Signal(SIGTERM);
  EXPECT_EQ(cluster.process().Wait(), 0);
  for (const auto& [r, pid] : after) {
    EXPECT_NE(kill(static_cast<pid_t>(pid), 0), 0) << "orphan " << r;
  }
}

// Listens on 127.0.0.1:`port` until destroyed (-1 fd if it could not).
class PortHolder {
 public:
  explicit PortHolder(int port) {
    // The killed process's socket goes when the kernel has torn it down.
    for (int i = 0; i < 50 && fd_ < 0; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
          listen(fd, 1) == 0) {
        fd_ = fd;
      } else {
        close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  ~PortHolder() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

TEST(SupervisionPortTest, RestartBacksOffUntilItsPortIsFree) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  const std::map<std::string, int64_t> before = RolePids(cluster);
  ASSERT_EQ(before.size(), 3u);
  const int port =
      std::stoi(cluster.decode().substr(cluster.decode().rfind(':') + 1));
  ASSERT_EQ(kill(static_cast<pid_t>(before.at("decode")), SIGKILL), 0);
  const auto killed_at = Clock::now();
  std::vector<std::string> lines;
  {
    // Someone else holds the decode node's port for a while: each restart
    // fails to bind it and waits twice as long as the one before.
    PortHolder holder(port);
    ASSERT_TRUE(holder.ok());
    while (MsSince(killed_at) < 1200) {
      const std::string line = cluster.process().ReadLine(100);
      if (!line.empty()) lines.push_back(line);
    }
  }
  const std::string restarted =
      LineStartingWith(cluster.process(), "restarted role=decode", &lines);
  ASSERT_FALSE(restarted.empty()) << ::testing::PrintToString(lines);
  ASSERT_GE(lines.size(), 3u) << ::testing::PrintToString(lines);
  EXPECT_EQ(Field(lines[0], "restart_in_ms"), "100") << lines[0];
  EXPECT_EQ(lines[1].rfind("exited role=decode", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("exit=code 1"), std::string::npos) << lines[1];
  EXPECT_EQ(Field(lines[1], "restart_in_ms"), "200") << lines[1];
  const int restarts = std::stoi(Field(restarted, "restarts"));
  EXPECT_GE(restarts, 2);
  EXPECT_EQ(static_cast<int>(lines.size()), restarts + 1)
      << ::testing::PrintToString(lines);
  // On its own port again: the router serves without being restarted.
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion("back on its port", 4), "sk-acme");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(RolePids(cluster).at("router"), before.at("router"));
  EXPECT_EQ(MetricValue(Get(cluster.router(), "/metrics").body,
                        "kvcanary_engine_restarts_total", "role=\"decode\""),
            restarts);
}

INSTANTIATE_TEST_SUITE_P(EachRole, SupervisionTest,
                         ::testing::Values("prefill", "decode", "router"),
                         [](const auto& info) { return info.param; });

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

int PortOf(const std::string& url) {
  return std::stoi(url.substr(url.rfind(':') + 1));
}

TEST(SupervisionRouterTest, MissingRoleIs503NamingItAndServedWhenBack) {
  const std::string tenants = WriteTenantsFile();
  const std::string secret = "--internal_secret_file=" + WriteSecretFile();
  const int kv = FreePort();
  std::string prefill_url;
  // Each role's configuration: one secret, and each other's addresses.
  auto args = [&](const std::string& role, int port) {
    std::vector<std::string> a = {"serve", "--role=" + role, secret,
                                  "--port=" + std::to_string(port)};
    if (role == "prefill") {
      a.push_back("--decode_kv=decode-0=127.0.0.1:" + std::to_string(kv));
    } else {
      a.push_back("--prefill=" + prefill_url);
      a.push_back("--kv_port=" + std::to_string(kv));
    }
    return a;
  };
  auto prefill = std::make_unique<Node>(args("prefill", 0));
  prefill_url = prefill->url;
  auto decode = std::make_unique<Node>(args("decode", 0));
  const std::string decode_url = decode->url;
  Node router({"serve", "--role=router", "--tenants=" + tenants, secret,
               "--prefill=" + prefill_url, "--decode=" + decode_url});
  ASSERT_FALSE(router.url.empty());
  const std::string ask = Completion("once upon a time", 6);
  HttpResult before = Post(router.url, "/v1/completions", ask, "sk-acme");
  ASSERT_EQ(before.status, 200) << before.body;

  for (const std::string role : {"prefill", "decode"}) {
    SCOPED_TRACE(role);
    std::unique_ptr<Node>& node = role == "prefill" ? prefill : decode;
    const std::string url = role == "prefill" ? prefill_url : decode_url;
    node->process.Signal(SIGKILL);
    node->process.Wait();
    // Answered at once, whether or not the router has noticed yet.
    const auto asked = Clock::now();
    HttpResult down = Post(router.url, "/v1/completions", ask, "sk-acme");
    EXPECT_LT(MsSince(asked), 5000);
    EXPECT_EQ(down.status, 503) << down.body;
    EXPECT_EQ(down.json["error"]["type"], "server_error") << down.body;
    EXPECT_NE(down.json["error"]["message"].get<std::string>().find(role),
              std::string::npos)
        << down.body;
    // Once the router has noticed, /health says which role is missing.
    bool degraded = false;
    for (int i = 0; i < 100 && !degraded; ++i) {
      HttpResult h = Get(router.url, "/health");
      degraded = h.json["status"] == "degraded";
      if (!degraded) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(degraded);
    HttpResult refused = Post(router.url, "/v1/completions", ask, "sk-acme");
    EXPECT_EQ(refused.status, 503) << refused.body;
    EXPECT_NE(refused.body.find("The " + role + " node is down"),
              std::string::npos)
        << refused.body;
    EXPECT_TRUE(refused.HasHeader("X-Kvcanary-Request-Id"));

    // Back on the same port: served at the next request, same router.
    node.reset();
    node = std::make_unique<Node>(args(role, PortOf(url)));
    ASSERT_EQ(node->url, url);
    HttpResult again = Post(router.url, "/v1/completions", ask, "sk-acme");
    EXPECT_EQ(again.status, 200) << again.body;
    EXPECT_EQ(TextOf(again), TextOf(before));
    EXPECT_EQ(Get(router.url, "/health").json["status"], "ok");
  }
}

}  // namespace
}  // namespace kvcanary::testing
