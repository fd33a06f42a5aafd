// Attacks on the engine's internal plane, each against `kvcanary-engine up`
// as separate processes (docs/nodes.md, "Internal plane"): every internal
// route and the KV port without or with a wrong credential, a reservation
// claim race, addresses smuggled into requests (SSRF), the trace stream
// without its token or past its reader cap, an oversized body.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/nodes/openai_api.h"
#include "engine/transfer/internal_auth.h"
#include "engine/transfer/kv_connection.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using engine::SharedSecret;
using nlohmann::json;

constexpr char kWrongSecret[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

double Requests(const std::string& node) {
  const std::string m = Get(node, "/metrics").body;
  double total = 0;
  size_t pos = 0;
  while ((pos = m.find("kvcanary_node_requests_total{", pos)) !=
         std::string::npos) {
    const size_t end = m.find('\n', pos);
    total += std::stod(m.substr(m.rfind(' ', end) + 1, end));
    pos = end;
  }
  return total;
}

HttpResult GetWithAuth(const std::string& base, const std::string& path,
                       const std::string& authorization) {
  httplib::Client client(base);
  client.set_read_timeout(5, 0);
  httplib::Headers h;
  if (!authorization.empty()) h.emplace("Authorization", authorization);
  auto res = client.Get(path.c_str(), h);
  HttpResult r;
  if (!res) return r;
  r.status = res->status;
  r.body = res->body;
  r.json = json::parse(r.body, nullptr, false);
  return r;
}

// A generate / prefill body as a node would send it, for tenant 1.
json InternalBody(uint64_t request_id) {
  json b;
  b["request_id"] = request_id;
  b["tenant_id"] = 1u;
  b["prompt"] = {1, 5, 9, 12};
  b["max_tokens"] = 2u;
  b["reserved_pages"] = 1u;
  b["transfer_token"] = std::string(32, 'a');
  return b;
}

class InternalPlaneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster({}); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ok()); }
  static bool WaitForNoUsedPages() {
    for (int i = 0; i < 100; ++i) {
      if (UsedPages(cluster_->decode()) == 0 &&
          UsedPages(cluster_->prefill()) == 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  inline static Cluster* cluster_ = nullptr;
};

// The pid of `up`'s child whose command line holds `role_flag`; -1 if none.
pid_t ChildOf(pid_t parent, const std::string& role_flag) {
  std::ifstream children(
      absl::StrCat("/proc/", parent, "/task/", parent, "/children"));
  pid_t pid;
  while (children >> pid) {
    std::ifstream cmd(absl::StrCat("/proc/", pid, "/cmdline"));
    std::string line((std::istreambuf_iterator<char>(cmd)),
                     std::istreambuf_iterator<char>());
    if (line.find(role_flag) != std::string::npos) return pid;
  }
  return -1;
}

// Resident memory of `pid` in KiB (VmRSS); -1 if unreadable.
long RssKib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      long kib = -1;
      status >> kib;
      return kib;
    }
  }
  return -1;
}

TEST_F(InternalPlaneTest, EveryInternalRouteRefusesMissingAndWrongSecrets) {
  const double decode_before = Requests(cluster_->decode());
  const double prefill_before = Requests(cluster_->prefill());
  const std::string body = InternalBody(424242).dump();
  for (const std::string& secret :
       {std::string(), std::string(kWrongSecret), cluster_->trace_token()}) {
    SCOPED_TRACE(secret.empty() ? "no secret" : "wrong secret");
    for (const auto& [node, path] :
         {std::pair<std::string, std::string>{cluster_->decode(),
                                              "/internal/v1/generate"},
          {cluster_->prefill(), "/internal/v1/prefill"}}) {
      HttpResult r = Post(node, path, body, secret);
      EXPECT_EQ(r.status, 401) << path << ": " << r.body;
      EXPECT_EQ(r.body.find("424242"), std::string::npos) << r.body;
    }
    for (const std::string& node : {cluster_->decode(), cluster_->prefill()}) {
      HttpResult r = GetWithAuth(node, "/internal/v1/limits",
                                 secret.empty() ? "" : "Bearer " + secret);
      EXPECT_EQ(r.status, 401) << r.body;
      EXPECT_EQ(r.body.find("page_tokens"), std::string::npos) << r.body;
    }
  }
  // A wrong scheme and a secret with a suffix are refused too.
  EXPECT_EQ(GetWithAuth(cluster_->decode(), "/internal/v1/limits",
                        "Basic " + cluster_->internal_secret())
                .status,
            401);
  EXPECT_EQ(GetWithAuth(cluster_->decode(), "/internal/v1/limits",
                        "Bearer " + cluster_->internal_secret() + "x")
                .status,
            401);
  // Nothing ran, nothing is held.
  EXPECT_EQ(Requests(cluster_->decode()), decode_before);
  EXPECT_EQ(Requests(cluster_->prefill()), prefill_before);
  EXPECT_EQ(UsedPages(cluster_->decode()), 0);
  EXPECT_EQ(UsedPages(cluster_->prefill()), 0);
  // The right secret opens them; /health stays open.
  EXPECT_EQ(GetWithAuth(cluster_->decode(), "/internal/v1/limits",
                        "Bearer " + cluster_->internal_secret())
                .status,
            200);
  EXPECT_EQ(Get(cluster_->decode(), "/health").status, 200);
}

TEST_F(InternalPlaneTest, TheRoutersHealthShowsAddressesAndPidsOnlyToTheAdmin) {
  // Open: up or not per role, nothing that maps the deployment.
  HttpResult open = Get(cluster_->router(), "/health");
  ASSERT_EQ(open.status, 200) << open.body;
  EXPECT_EQ(open.json["status"], "ok") << open.body;
  EXPECT_EQ(open.json["roles"]["prefill"], "up") << open.body;
  EXPECT_EQ(open.json["roles"]["decode"], "up") << open.body;
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    const std::string port = node.substr(node.rfind(':') + 1);
    EXPECT_EQ(open.body.find(":" + port), std::string::npos) << open.body;
  }
  EXPECT_EQ(open.body.find("pid"), std::string::npos) << open.body;
  EXPECT_FALSE(open.json.contains("supervisor"));
  // A wrong token (or a tenant's key, or the internal secret) is refused.
  for (const std::string& wrong :
       {std::string(kWrongSecret), std::string("sk-acme"),
        cluster_->internal_secret()}) {
    HttpResult r = Get(cluster_->router(), "/health", wrong);
    EXPECT_EQ(r.status, 401) << r.body;
    EXPECT_EQ(r.body.find("pid"), std::string::npos) << r.body;
    // The OpenAI error shape, as every other error of the router's.
    EXPECT_EQ(r.json["error"]["type"], "authentication_error") << r.body;
    EXPECT_TRUE(r.json["error"]["message"].is_string()) << r.body;
  }
  // The admin token sees the nodes and up's children.
  HttpResult admin = AdminHealth(*cluster_);
  ASSERT_EQ(admin.status, 200) << admin.body;
  EXPECT_NE(admin.body.find(cluster_->decode()), std::string::npos)
      << admin.body;
  ASSERT_TRUE(admin.json.contains("supervisor")) << admin.body;
  EXPECT_EQ(admin.json["supervisor"]["roles"].size(), 3u) << admin.body;
  EXPECT_EQ(RolePids(*cluster_).size(), 3u);
}

TEST_F(InternalPlaneTest, TheRoutersOpenMetricsNameNoNodeAddress) {
  HttpResult m = Get(cluster_->router(), "/metrics");
  ASSERT_EQ(m.status, 200) << m.body;
  // Each node by its role and index, as the admin's /health lists them.
  EXPECT_NE(
      m.body.find("kvcanary_router_node_up{node=\"0\",role=\"decode\"} 1"),
      std::string::npos)
      << m.body;
  EXPECT_NE(
      m.body.find("kvcanary_router_node_up{node=\"0\",role=\"prefill\"} 1"),
      std::string::npos)
      << m.body;
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    const std::string port = node.substr(node.rfind(':') + 1);
    EXPECT_EQ(m.body.find(node), std::string::npos) << m.body;
    EXPECT_EQ(m.body.find(":" + port), std::string::npos) << m.body;
  }
  EXPECT_EQ(m.body.find("url="), std::string::npos) << m.body;
}

// A router resends a request whose kept connection closed before any
// answer (a decode node that was stopping may have read it): the decode
// node runs a request id once. The resend gets 409 and does no work.
TEST_F(InternalPlaneTest, TheDecodeNodeRunsARequestIdOnce) {
  const std::string decode = cluster_->decode();
  auto transfers = [&] {
    return MetricValue(Get(decode, "/metrics").body,
                       "kvcanary_node_transfers_total", "outcome=\"ok\"");
  };
  const double before = transfers();
  const json body = InternalBody(888001);
  HttpResult first = Post(decode, "/internal/v1/generate", body.dump(),
                          cluster_->internal_secret());
  ASSERT_EQ(first.status, 200) << first.body;
  HttpResult again = Post(decode, "/internal/v1/generate", body.dump(),
                          cluster_->internal_secret());
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_EQ(again.json["error"]["code"], 6) << again.body;  // ALREADY_EXISTS
  EXPECT_EQ(transfers(), before + 1);  // one prefill and transfer, not two
  EXPECT_EQ(
      MetricValue(Get(decode, "/metrics").body, "kvcanary_node_requests_total",
                  "outcome=\"ALREADY_EXISTS\""),
      1);
  EXPECT_TRUE(WaitForNoUsedPages());
}

TEST_F(InternalPlaneTest, TraceNeedsItsTokenAndCapsItsReaders) {
  for (const std::string& auth :
       {std::string(), "Bearer " + std::string(kWrongSecret),
        "Bearer " + cluster_->internal_secret()}) {
    HttpResult r = GetWithAuth(cluster_->decode(), "/v1/trace", auth);
    EXPECT_EQ(r.status, 401) << r.body;
    EXPECT_EQ(r.body.find("\"req\""), std::string::npos) << r.body;
  }
  // Eight readers (up's default cap) hold the stream; a ninth gets 503
  // while the router keeps serving.
  std::vector<std::unique_ptr<TraceTap>> taps;
  for (int i = 0; i < 8; ++i) {
    taps.push_back(std::make_unique<TraceTap>(cluster_->decode(),
                                              cluster_->trace_token()));
  }
  HttpResult ninth = GetWithAuth(cluster_->decode(), "/v1/trace",
                                 "Bearer " + cluster_->trace_token());
  EXPECT_EQ(ninth.status, 503) << ninth.body;
  EXPECT_EQ(Post(cluster_->router(), "/v1/completions",
                 Completion("while readers wait", 4), "sk-acme")
                .status,
            200);
  for (auto& t : taps) t->Stop();
}

// A listener that records whether anything connected to it.
class Trap {
 public:
  Trap() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    listen(fd_, 16);
  }
  ~Trap() { close(fd_); }
  int port() const { return port_; }
  // Whether a connection is waiting to be accepted.
  bool Connected(int wait_ms) {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, wait_ms) > 0;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(InternalPlaneTest, AddressesInARequestAreNeverCalled) {
  Trap trap;
  const std::string url = absl::StrCat("http://127.0.0.1:", trap.port());
  // With the secret even: the nodes call only what their configuration
  // names, whatever the body says.
  json generate = InternalBody(777001);
  generate["prefill_url"] = url;
  generate["kv_host"] = "127.0.0.1";
  generate["kv_port"] = trap.port();
  Post(cluster_->decode(), "/internal/v1/generate", generate.dump(),
       cluster_->internal_secret());
  json prefill = InternalBody(777002);
  prefill["kv_host"] = "127.0.0.1";
  prefill["kv_port"] = trap.port();
  prefill["kv_peer"] = url;
  HttpResult p = Post(cluster_->prefill(), "/internal/v1/prefill",
                      prefill.dump(), cluster_->internal_secret());
  EXPECT_NE(p.status, 200) << p.body;  // no such peer: nothing sent
  EXPECT_FALSE(trap.Connected(1000)) << "a node connected to an address "
                                        "taken from a request";
  EXPECT_TRUE(WaitForNoUsedPages());
}

// The KV port, spoken to directly.
class KvPortTest : public InternalPlaneTest {
 protected:
  absl::StatusOr<std::unique_ptr<engine::kv::FrameConnection>> Connect() {
    return engine::kv::FrameConnection::Connect(
        "127.0.0.1", cluster_->kv_port(), absl::Seconds(5));
  }
  // Connects and answers the hello with a proof under `secret`.
  std::unique_ptr<engine::kv::FrameConnection> Authenticated(
      const SharedSecret& secret) {
    auto conn = Connect();
    if (!conn.ok()) return nullptr;
    auto hello = (*conn)->Receive(absl::Seconds(5));
    if (!hello.ok()) return nullptr;
    const auto* h = std::get_if<engine::kv::Hello>(&*hello);
    if (h == nullptr) return nullptr;
    if (!(*conn)
             ->Send(engine::kv::Auth{secret.KvProof(h->nonce)},
                    absl::Seconds(5))
             .ok()) {
      return nullptr;
    }
    return *std::move(conn);
  }
  static engine::kv::Metadata Meta(uint64_t request) {
    engine::kv::Metadata m;
    m.request = RequestId(request);
    m.tenant = TenantId(1);
    m.prompt_tokens = 3;
    m.reserved_pages = 1;
    return m;
  }
  double Refused(const std::string& reason) {
    return MetricValue(Get(cluster_->decode(), "/metrics").body,
                       "kvcanary_node_kv_connections_refused_total",
                       "reason=\"" + reason + "\"");
  }
};

TEST_F(KvPortTest, AConnectionWithoutTheSecretIsRefusedBeforeItsMetadata) {
  const double before = std::max(0.0, Refused("authentication"));
  // Skipping the handshake: Metadata first.
  auto conn = Connect();
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE((*conn)->Receive(absl::Seconds(5)).ok());  // the hello
  ASSERT_TRUE((*conn)->Send(Meta(1), absl::Seconds(5)).ok());
  auto answer = (*conn)->Receive(absl::Seconds(5));
  ASSERT_TRUE(answer.ok()) << answer.status();
  const auto* abort = std::get_if<engine::kv::Abort>(&*answer);
  ASSERT_NE(abort, nullptr);
  EXPECT_EQ(abort->code,
            static_cast<uint32_t>(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(abort->request, RequestId(0));
  // A proof under the wrong secret: the same.
  auto wrong =
      Authenticated(SharedSecret::FromString(std::string(kWrongSecret)));
  ASSERT_NE(wrong, nullptr);
  auto answer2 = wrong->Receive(absl::Seconds(5));
  ASSERT_TRUE(answer2.ok()) << answer2.status();
  ASSERT_NE(std::get_if<engine::kv::Abort>(&*answer2), nullptr);
  EXPECT_GE(Refused("authentication"), before + 2);
}

TEST_F(KvPortTest, ClaimRaceWithoutTheTransferTokenFailsNoVictim) {
  const SharedSecret secret =
      SharedSecret::FromString(cluster_->internal_secret());
  // The attacker learns the current request id from a request of its own.
  HttpResult mine = Post(cluster_->router(), "/v1/completions",
                         Completion("the attacker's own", 2), "sk-globex");
  ASSERT_EQ(mine.status, 200) << mine.body;
  const uint64_t last = std::stoull(mine.Header(engine::kRequestIdHeader));
  std::atomic<bool> stop{false};
  std::set<std::string> messages;
  std::mutex mu;
  std::atomic<int> attempts{0};
  std::thread attacker([&] {
    while (!stop.load()) {
      for (uint64_t id = last + 1; id <= last + 60 && !stop.load(); ++id) {
        auto c = Authenticated(secret);
        if (c == nullptr) continue;
        engine::kv::Metadata m = Meta(id);
        if (!c->Send(m, absl::Seconds(2)).ok()) continue;
        ++attempts;
        auto a = c->Receive(absl::Seconds(2));
        if (!a.ok()) continue;
        if (auto* abort = std::get_if<engine::kv::Abort>(&*a)) {
          std::lock_guard<std::mutex> lock(mu);
          messages.insert(abort->message);
        }
      }
    }
  });
  // The n-th victim request goes only once the attacker has made n claims
  // (or after 10 s), so the claims race the victims' transfers however fast
  // or loaded the machine is.
  std::atomic<int> sent{0};
  auto wait_for_a_claim = [&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    for (;;) {
      int n = sent.load();
      if ((attempts.load() > n || absl::Now() >= deadline) &&
          sent.compare_exchange_strong(n, n + 1)) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
  };
  std::vector<std::thread> victims;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    victims.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        wait_for_a_claim();
        HttpResult r = Post(cluster_->router(), "/v1/completions",
                            Completion(LongPrompt(10 + i), 4), "sk-acme");
        if (r.status != 200) ++failures;
      }
    });
  }
  for (auto& v : victims) v.join();
  stop = true;
  attacker.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(attempts.load(), 40);
  // Every refusal reads the same: no prompt length, no tenant, no state.
  EXPECT_EQ(messages.size(), 1u);
  for (const std::string& m : messages) {
    EXPECT_EQ(m, "no reservation matches this request id and transfer token");
  }
  EXPECT_TRUE(WaitForNoUsedPages());
}

// A raw connection to 127.0.0.1:port (-1 on failure).
int Dial(const std::string& base) {
  const int port = std::stoi(base.substr(base.rfind(':') + 1));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// POSTs a JSON body of `size` bytes the way a careful client does: it
// reads the answer as soon as one comes, even before the body is all sent
// (the router answers 413 from the headers, drains up to 16 MiB, then
// closes). Returns the raw response ("" if none).
std::string PostHuge(const std::string& base, const std::string& key,
                     size_t size) {
  const int fd = Dial(base);
  if (fd < 0) return "";
  const std::string head = absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ", key,
      "\r\nContent-Type: application/json\r\nContent-Length: ", size,
      "\r\n\r\n");
  std::string body = "{\"max_tokens\": 1, \"prompt\": \"";
  body.append(size - body.size() - 2, 'a');
  body += "\"}";
  std::string out = head + body;
  std::string response;
  size_t sent = 0;
  char buf[65536];
  while (true) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < out.size() ? POLLOUT : 0)),
             0};
    if (poll(&p, 1, 10000) <= 0) break;
    if (p.revents & POLLIN) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      response.append(buf, n);
      if (response.find("\r\n\r\n") != std::string::npos &&
          response.find("}}") != std::string::npos) {
        break;  // the whole (small) error body is in
      }
      continue;
    }
    if (p.revents & (POLLERR | POLLHUP)) break;
    const ssize_t n =
        send(fd, out.data() + sent,
             std::min<size_t>(out.size() - sent, 1 << 16), MSG_NOSIGNAL);
    if (n <= 0) continue;  // reset: read what came
    sent += n;
  }
  close(fd);
  return response;
}

TEST_F(InternalPlaneTest, AFiftyMegabyteBodyIs413WithoutTheRouterGrowing) {
  const pid_t router = ChildOf(cluster_->process().pid(), "--role=router");
  ASSERT_GT(router, 0);
  const long before = RssKib(router);
  const std::string r = PostHuge(cluster_->router(), "sk-acme", 50u << 20);
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r.substr(0, 300);
  EXPECT_NE(r.find("\"type\":\"invalid_request_error\""), std::string::npos)
      << r.substr(0, 300);
  EXPECT_LT(RssKib(router) - before, 64 * 1024)
      << "router RSS grew from " << before << " KiB";
  // And it goes on serving.
  EXPECT_EQ(Post(cluster_->router(), "/v1/completions",
                 Completion("after the flood", 2), "sk-acme")
                .status,
            200);
}

TEST_F(InternalPlaneTest, PipelinedRequestsAreAllAnsweredInOrder) {
  const int fd = Dial(cluster_->router());
  ASSERT_GE(fd, 0);
  std::string batch;
  for (int i = 0; i < 3; ++i) {
    const std::string body = Completion(absl::StrCat("pipelined ", i), 2);
    absl::StrAppend(&batch,
                    "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                    "Authorization: Bearer sk-acme\r\n"
                    "Content-Type: application/json\r\nContent-Length: ",
                    body.size(), "\r\n\r\n", body);
  }
  batch += "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(fd, batch.data(), batch.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(batch.size()));
  std::string in;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) in.append(buf, n);
  close(fd);
  // Four answers, in the order asked: three completions, then /health.
  std::vector<size_t> at;
  for (size_t p = in.find("HTTP/1.1 "); p != std::string::npos;
       p = in.find("HTTP/1.1 ", p + 1)) {
    at.push_back(p);
  }
  ASSERT_EQ(at.size(), 4u) << in;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(in.compare(at[i], 12, "HTTP/1.1 200"), 0) << in;
    EXPECT_NE(in.substr(at[i], at[i + 1] - at[i]).find("text_completion"),
              std::string::npos);
  }
  EXPECT_NE(in.find("\"role\":\"router\"", at[3]), std::string::npos) << in;
}

// p99 of `n` sequential completions, in milliseconds; -1 if any failed.
double P99Ms(const std::string& router, int n) {
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (Post(router, "/v1/completions", Completion("quick", 1), "sk-acme")
            .status != 200) {
      return -1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[static_cast<size_t>(0.99 * (ms.size() - 1))];
}

TEST_F(InternalPlaneTest, FiveHundredSlowlorisConnectionsDoNotStarveOthers) {
  const double baseline = P99Ms(cluster_->router(), 40);
  ASSERT_GT(baseline, 0);
  // 500 connections, each with half a request line and then a header byte
  // now and then: none ever finishes its headers.
  std::vector<int> slow;
  for (int i = 0; i < 500; ++i) {
    const int fd = Dial(cluster_->router());
    if (fd < 0) break;
    const std::string start = "POST /v1/completions HTTP/1.1\r\nX-Slow: ";
    send(fd, start.data(), start.size(), MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  ASSERT_EQ(slow.size(), 500u);
  for (int fd : slow) send(fd, "a", 1, MSG_NOSIGNAL);
  // Steady state: the server has read what they sent and waits on them.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double under = P99Ms(cluster_->router(), 40);
  for (int fd : slow) close(fd);
  ASSERT_GT(under, 0) << "a request failed while 500 connections dawdled";
  // The bound is 2x the baseline; the slack absorbs a busy
  // machine's scheduling noise on requests of a few milliseconds.
  EXPECT_LE(under, 2 * baseline + 250)
      << "p99 " << under << " ms under slowloris, " << baseline << " ms before";
  std::printf(
      "slowloris: p99 %.1f ms before, %.1f ms with 500 slow "
      "connections\n",
      baseline, under);
}

}  // namespace
}  // namespace kvcanary::testing
