// Floods and malformed tries on the decode node's KV port, against
// `kvcanary-engine up` as separate processes (docs/nodes.md, "Internal
// plane", "Bounded."): idle sockets from another address must not starve the
// prefill node's transfers, with or without --tls; every malformed try before
// Auth gets the same UNAUTHENTICATED Abort and is counted once; an unknown
// kv_peer is a 4xx.
//
// On loopback every process shares 127.0.0.1, the prefill nodes' reserved
// address: the attacker binds its sockets to 127.0.0.2 first.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/crc32c.h"
#include "common/wire.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_transfer_format.h"
#include "gtest/gtest.h"
#include "tests/attack/flood.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

namespace kv = engine::kv;

// The flood: sockets and how long the test lasts.
constexpr int kFloodSockets = 64;
constexpr absl::Duration kFloodFor = absl::Seconds(12);
// How soon the attacker reopens a socket the server closed.
constexpr std::chrono::milliseconds kReopenAfter(20);
constexpr int kClientStreams = 4;

// Completions through the router from kClientStreams threads for `d`:
// how many were sent and how many came back 200.
struct Served {
  int ok = 0;
  int total = 0;
  std::string first_failure;
};
Served CompletionsFor(const std::string& router, absl::Duration d) {
  std::atomic<int> ok{0}, total{0};
  std::mutex mu;
  std::string first_failure;
  const absl::Time end = absl::Now() + d;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClientStreams; ++c) {
    clients.emplace_back([&, c] {
      int i = 0;
      while (absl::Now() < end) {
        HttpResult r = Post(
            router, "/v1/completions",
            Completion("once upon a time " + std::to_string(c * 1000 + i++), 4),
            "sk-acme", 30);
        ++total;
        if (r.status == 200) {
          ++ok;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        if (first_failure.empty()) {
          first_failure = std::to_string(r.status) + " " + r.body;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  return Served{ok.load(), total.load(), first_failure};
}

double Refused(const std::string& metrics, const std::string& reason) {
  return std::max(
      0.0, MetricValue(metrics, "kvcanary_node_kv_connections_refused_total",
                       "reason=\"" + reason + "\""));
}

// Runs the flood against `cluster` while completions go through its
// router, prints the figures and checks the bar: at least 99% served.
void FloodWhileServing(Cluster& cluster, const std::string& label,
                       const std::string& decode_metrics_before) {
  RaiseOpenFilesLimit(4096);
  SocketFlood flood("127.0.0.2", cluster.kv_port(), kFloodSockets,
                    kReopenAfter);
  flood.Start();
  absl::SleepFor(absl::Milliseconds(300));  // the flood is up first
  const Served served = CompletionsFor(cluster.router(), kFloodFor);
  flood.Stop();
  std::printf(
      "KV flood (%s): %d ok of %d completions (%.2f%%); attacker opened %lld "
      "connections, %lld closed by the node\n",
      label.c_str(), served.ok, served.total,
      served.total == 0 ? 0.0 : 100.0 * served.ok / served.total,
      static_cast<long long>(flood.opened()),
      static_cast<long long>(flood.closed_by_server()));
  (void)decode_metrics_before;
  EXPECT_GT(served.total, 20);
  EXPECT_GE(served.ok, 0.99 * served.total) << served.first_failure;
  EXPECT_GT(flood.opened(), static_cast<uint64_t>(kFloodSockets));  // reopened
}

class KvFloodTest : public SharedClusterTest {};

TEST_F(KvFloodTest, SixtyFourReopeningIdleSocketsDoNotStarveTransfers) {
  const std::string before = Get(cluster_->decode(), "/metrics").body;
  FloodWhileServing(*cluster_, "plain", before);
  const std::string after = Get(cluster_->decode(), "/metrics").body;
  // The attacker's surplus is refused at accept by the per-peer cap, and
  // what it held was let go at the pre-auth deadline, as authentication.
  EXPECT_GT(Refused(after, "peer cap"), Refused(before, "peer cap"));
  EXPECT_GT(Refused(after, "authentication"),
            Refused(before, "authentication"));
  std::printf(
      "refused: peer cap %.0f, authentication %.0f, pre-auth cap %.0f\n",
      Refused(after, "peer cap") - Refused(before, "peer cap"),
      Refused(after, "authentication") - Refused(before, "authentication"),
      Refused(after, "pre-auth cap") - Refused(before, "pre-auth cap"));
  EXPECT_TRUE(EventuallyNoPagesUsed(cluster_->decode()));
  // Nothing is held once the flood is over.
  bool drained = false;
  for (int i = 0; i < 50 && !drained; ++i) {
    drained = MetricValue(Get(cluster_->decode(), "/metrics").body,
                          "kvcanary_node_kv_unauthenticated_connections",
                          "decode") == 0;
    if (!drained) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_TRUE(drained);
}

// The per-peer cap is the operator's (--kv-max-unauthenticated-per-peer):
// at 1, a second and third silent socket from one address are refused at
// accept while the first waits out its pre-auth deadline.
TEST(KvPortTuningTest, ThePerPeerCapIsTheOperators) {
  Cluster cluster({"--kv-max-unauthenticated-per-peer=1"});
  ASSERT_TRUE(cluster.ok());
  const std::string before = Get(cluster.decode(), "/metrics").body;
  SocketFlood flood("127.0.0.2", cluster.kv_port(), 3, std::chrono::hours(1));
  flood.Start();
  // Refusals close at once; the one held goes at its 200 ms deadline.
  for (int i = 0; i < 100 && flood.closed_by_server() < 2; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  flood.Stop();
  const std::string after = Get(cluster.decode(), "/metrics").body;
  EXPECT_GE(Refused(after, "peer cap") - Refused(before, "peer cap"), 2)
      << after;
}

// The bytes of a frame header with `type` and `payload_size`, its CRC
// right.
std::string Header(uint8_t type, uint32_t payload_size) {
  std::string h;
  PutFixed32(&h, kv::kFrameMagic);
  PutFixed16(&h, kv::kProtocolVersion);
  h.push_back(static_cast<char>(type));
  h.push_back(0);
  PutFixed32(&h, payload_size);
  PutFixed32(&h, Crc32c(h));
  return h;
}

TEST_F(KvFloodTest, EveryMalformedTryBeforeAuthIsOneUnauthenticatedAbort) {
  std::string bad_crc;
  kv::EncodeFrame(kv::Auth{}, &bad_crc);
  bad_crc[12] ^= 0x01;  // the header CRC
  struct Try {
    const char* name;
    std::string bytes;  // "" for silence
  };
  const std::vector<Try> tries = {
      {"garbage", std::string(64, '\x5a')},
      {"http request", "GET /internal/v1/limits HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"bad crc", bad_crc},
      {"oversized header", Header(2, 1u << 30)},
      {"silence", ""},
  };
  const double before =
      Refused(Get(cluster_->decode(), "/metrics").body, "authentication");
  for (const Try& t : tries) {
    SCOPED_TRACE(t.name);
    auto conn = kv::FrameConnection::Connect("127.0.0.1", cluster_->kv_port(),
                                             absl::Seconds(5));
    ASSERT_TRUE(conn.ok()) << conn.status();
    auto hello = (*conn)->Receive(absl::Seconds(5));
    ASSERT_TRUE(hello.ok()) << hello.status();
    ASSERT_TRUE(std::holds_alternative<kv::Hello>(*hello));
    if (!t.bytes.empty()) {
      ASSERT_TRUE((*conn)->SendRaw(t.bytes, absl::Seconds(5)).ok());
    }
    auto answer = (*conn)->Receive(absl::Seconds(5));
    ASSERT_TRUE(answer.ok()) << answer.status();
    const auto* abort = std::get_if<kv::Abort>(&*answer);
    ASSERT_NE(abort, nullptr);
    EXPECT_EQ(abort->request, RequestId(0));
    EXPECT_EQ(abort->code,
              static_cast<uint32_t>(absl::StatusCode::kUnauthenticated));
    EXPECT_EQ(abort->message, "KV connection failed authentication");
    // Then the node closes.
    EXPECT_FALSE((*conn)->Receive(absl::Seconds(5)).ok());
  }
  const double after =
      Refused(Get(cluster_->decode(), "/metrics").body, "authentication");
  EXPECT_EQ(after - before, static_cast<double>(tries.size()));
}

TEST_F(KvFloodTest, UnknownKvPeerIsA400) {
  nlohmann::json b;
  b["request_id"] = 991001u;
  b["tenant_id"] = 1u;
  b["prompt"] = {1, 5, 9, 12};
  b["reserved_pages"] = 1u;
  b["transfer_token"] = std::string(32, 'a');
  b["kv_peer"] = "nobody";
  HttpResult r = Post(cluster_->prefill(), "/internal/v1/prefill", b.dump(),
                      cluster_->internal_secret());
  EXPECT_EQ(r.status, 400) << r.body;
  ASSERT_TRUE(r.json.is_object()) << r.body;
  EXPECT_TRUE(r.json["error"]["message"].is_string()) << r.body;
  EXPECT_TRUE(EventuallyNoPagesUsed(cluster_->prefill()));
}

class KvFloodTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster({"--tls"}); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ok()); }
  inline static Cluster* cluster_ = nullptr;
};

// Plain TCP sockets that never start the handshake.
TEST_F(KvFloodTlsTest, SixtyFourReopeningPlainSocketsDoNotStarveTransfers) {
  FloodWhileServing(*cluster_, "--tls", "");
}

}  // namespace
}  // namespace kvcanary::testing
