// KV protocol version 4: a session carries transfers one after another
// (docs/kv-transfer.md, "Sessions"). A KvSender and a KvGate over real
// sockets on 127.0.0.1, plain and over mutual TLS: one handshake for many
// transfers, no transfer slot held between them, idle sessions closed by
// deadline, by cap and at shutdown, and a session closed under a sender
// replaced without losing the transfer.
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "engine/transfer/kv_admission.h"
#include "engine/transfer/kv_sender.h"
#include "gtest/gtest.h"
#include "tests/common/tls_fixtures.h"
#include "tests/engine/kv_fake_host.h"

namespace kvcanary::engine {
namespace {

const TenantId kTenant(7);

KvGeometry Geometry() {
  KvGeometry g;
  g.page_tokens = 4;
  g.n_layers = 2;
  g.kv_heads = 1;
  g.head_dim = 2;
  g.vocab_size = 32;
  return g;
}

using kvtest::FakeHost;

// A reservation of one full page for `id`; its token.
TransferToken Reserve(FakeHost& host, RequestId id) {
  KvReservation r;
  r.request = id;
  r.tenant = kTenant;
  r.prompt_pages = 1;
  r.prompt_tokens = Geometry().page_tokens;
  r.reserved_pages = 1;
  return host.Reserve(r);
}

// One request's transfer: Metadata and one full page in each layer.
struct Transfer {
  kv::Metadata meta;
  std::vector<kv::Page> pages;
};

Transfer MakeTransfer(RequestId id, const TransferToken& token) {
  const KvGeometry g = Geometry();
  Transfer t;
  t.meta.request = id;
  t.meta.tenant = kTenant;
  t.meta.prompt_tokens = static_cast<uint32_t>(g.page_tokens);
  t.meta.reserved_pages = 1;
  t.meta.page_tokens = static_cast<uint32_t>(g.page_tokens);
  t.meta.n_layers = static_cast<uint32_t>(g.n_layers);
  t.meta.kv_heads = static_cast<uint32_t>(g.kv_heads);
  t.meta.head_dim = static_cast<uint32_t>(g.head_dim);
  t.meta.transfer_token = token;
  for (int layer = 0; layer < g.n_layers; ++layer) {
    kv::Page p;
    p.index = 0;
    p.layer = static_cast<uint32_t>(layer);
    p.stamp.layer = p.layer;
    p.stamp.page = PageId(3);
    p.stamp.writer = StampIdentity{id, kTenant, PageGeneration(1)};
    p.stamp.owner = p.stamp.writer;
    p.stamp.filled = static_cast<uint32_t>(g.page_tokens);
    p.slots = static_cast<uint32_t>(g.page_tokens);
    p.kv_bytes.assign(2 * g.page_tokens * g.row_bytes(), 'k');
    t.pages.push_back(std::move(p));
  }
  return t;
}

// The decode node's KV port in miniature: every accepted connection served
// through KvGate on a thread of its own, until Stop().
class Port {
 public:
  Port(const KvAdmissionOptions& options, FakeHost* host,
       const tls::Context* tls)
      : receiver_(host, ReceiverOptions()),
        gate_(options, host, &receiver_, tls),
        listener_(*kv::FrameListener::Listen("127.0.0.1", 0)) {
    door_ = std::thread([this, options] {
      while (true) {
        auto conn = listener_->Accept(absl::Seconds(5));
        if (absl::IsCancelled(conn.status())) return;
        if (!conn.ok()) continue;
        ++accepted_;
        const absl::Time deadline = absl::Now() + options.auth_deadline;
        std::unique_ptr<KvAdmission::Hold> hold = gate_.Admit(**conn);
        if (hold == nullptr) continue;
        absl::MutexLock lock(&mu_);
        sessions_.emplace_back([this, deadline, c = std::move(*conn),
                                h = std::move(hold)] {
          gate_.Serve(
              *c, *h, deadline,
              [this](const absl::Status& verdict, RequestId, bool, uint64_t) {
                if (verdict.ok()) ++transfers_ok_;
              });
          ++sessions_ended_;
        });
      }
    });
  }
  ~Port() { Stop(); }

  void Stop() {
    listener_->Close();
    if (door_.joinable()) door_.join();
    gate_.ShutdownAll();
    absl::MutexLock lock(&mu_);
    for (std::thread& t : sessions_) t.join();
    sessions_.clear();
  }

  KvPeer peer() const { return {"decode-0", "127.0.0.1", listener_->port()}; }
  const KvGate& gate() const { return gate_; }
  KvGate& gate() { return gate_; }
  int accepted() const { return accepted_.load(); }
  int sessions_ended() const { return sessions_ended_.load(); }
  int transfers_ok() const { return transfers_ok_.load(); }

 private:
  static KvReceiverOptions ReceiverOptions() {
    static const SharedSecret* secret =
        new SharedSecret(SharedSecret::FromString(std::string(40, 's')));
    KvReceiverOptions o;
    o.secret = secret;
    o.geometry = Geometry();
    o.frame_timeout = absl::Seconds(5);
    return o;
  }

  KvReceiver receiver_;
  KvGate gate_;
  std::unique_ptr<kv::FrameListener> listener_;
  std::thread door_;
  absl::Mutex mu_;
  std::vector<std::thread> sessions_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> accepted_{0};
  std::atomic<int> sessions_ended_{0};
  std::atomic<int> transfers_ok_{0};
};

const SharedSecret& Secret() {
  static const SharedSecret* secret =
      new SharedSecret(SharedSecret::FromString(std::string(40, 's')));
  return *secret;
}

absl::Status SendOne(const KvSender& sender, FakeHost& host, const Port& port,
                     RequestId id) {
  const Transfer t = MakeTransfer(id, Reserve(host, id));
  uint64_t sent = 0;
  return sender.Send(port.peer(), t.meta, t.pages, /*first_token=*/1,
                     TransferDamage::kNone, &sent);
}

void WaitFor(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE(done()) << "timed out";
}

class KvSessionTest : public ::testing::TestWithParam<bool> {
 protected:
  // Null for plain TCP.
  const tls::Context* tls() {
    if (!GetParam()) return nullptr;
    if (ctx_ == nullptr) {
      auto loaded = tls::Context::Load(deployment_.files);
      EXPECT_TRUE(loaded.ok()) << loaded.status();
      if (loaded.ok()) ctx_ = *loaded;
    }
    return ctx_.get();
  }

 private:
  tls::testing::Deployment deployment_;
  std::shared_ptr<const tls::Context> ctx_;
};

TEST_P(KvSessionTest, ASessionCarriesTransfersOneAfterAnotherOnOneHandshake) {
  FakeHost host;
  Port port(KvAdmissionOptions{}, &host, tls());
  const KvSender sender(&Secret(), absl::Seconds(5), tls());
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(SendOne(sender, host, port, RequestId(i)).ok()) << i;
  }
  EXPECT_EQ(host.delivered(), 5);
  EXPECT_EQ(port.accepted(), 1);
  EXPECT_EQ(sender.opened(), 1u);
  EXPECT_EQ(sender.reused(), 4u);
  // Between transfers the session holds an idle place, not a slot.
  WaitFor([&] { return port.gate().admission().idle_sessions() == 1; });
  EXPECT_EQ(port.gate().admission().transfers(), 0);
  EXPECT_EQ(port.gate().admission().unauthenticated(), 0);
}

TEST_P(KvSessionTest, WithoutKeptSessionsEveryTransferHandshakes) {
  FakeHost host;
  Port port(KvAdmissionOptions{}, &host, tls());
  KvSender sender(&Secret(), absl::Seconds(5), tls());
  sender.set_max_idle_per_peer(0);
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(SendOne(sender, host, port, RequestId(i)).ok()) << i;
  }
  EXPECT_EQ(port.accepted(), 3);
  EXPECT_EQ(sender.opened(), 3u);
  EXPECT_EQ(sender.reused(), 0u);
}

TEST_P(KvSessionTest, AnIdleSessionPastItsDeadlineIsClosedAndReplaced) {
  FakeHost host;
  KvAdmissionOptions options;
  options.session_idle = absl::Milliseconds(100);
  Port port(options, &host, tls());
  const KvSender sender(&Secret(), absl::Seconds(5), tls());
  ASSERT_TRUE(SendOne(sender, host, port, RequestId(1)).ok());
  WaitFor([&] { return port.sessions_ended() == 1; });
  EXPECT_EQ(port.gate().admission().idle_sessions(), 0);
  // The sender sees the close before it would use the session.
  ASSERT_TRUE(SendOne(sender, host, port, RequestId(2)).ok());
  EXPECT_EQ(sender.opened(), 2u);
  EXPECT_EQ(host.delivered(), 2);
}

TEST_P(KvSessionTest, PastTheIdleCapASessionIsClosedAfterItsAck) {
  FakeHost host;
  KvAdmissionOptions options;
  options.max_idle_sessions = 0;
  Port port(options, &host, tls());
  const KvSender sender(&Secret(), absl::Seconds(5), tls());
  ASSERT_TRUE(SendOne(sender, host, port, RequestId(1)).ok());
  WaitFor([&] { return port.sessions_ended() == 1; });
  ASSERT_TRUE(SendOne(sender, host, port, RequestId(2)).ok());
  EXPECT_EQ(port.accepted(), 2);
  EXPECT_EQ(host.delivered(), 2);
}

TEST_P(KvSessionTest, ShutdownEndsAnIdleSessionAtOnce) {
  FakeHost host;
  Port port(KvAdmissionOptions{}, &host, tls());  // 30 s idle deadline
  const KvSender sender(&Secret(), absl::Seconds(5), tls());
  ASSERT_TRUE(SendOne(sender, host, port, RequestId(1)).ok());
  const absl::Time start = absl::Now();
  port.Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(port.sessions_ended(), 1);
}

TEST_P(KvSessionTest, AResumedSessionWithEverySlotTakenIsRefusedForCapacity) {
  FakeHost host;
  KvAdmissionOptions options;
  options.max_transfers = 1;
  // The stalled connection below is this test's own, not a KvSender that
  // retries: on a loaded machine its TLS handshake, Hello and Auth could
  // miss the 200 ms pre-auth deadline (seen once in 57 shuffled runs under
  // a 2-core load), which this test is not about.
  options.auth_deadline = absl::Seconds(10);
  Port port(options, &host, tls());
  const KvSender sender(&Secret(), absl::Seconds(5), tls());
  ASSERT_TRUE(SendOne(sender, host, port, RequestId(1)).ok());
  WaitFor([&] { return port.gate().admission().idle_sessions() == 1; });
  // The only slot, taken by another authenticated connection that stalls
  // in its transfer: its Metadata names no reservation it can claim yet,
  // so it holds the slot while the receiver waits (frames of a stalled
  // sender: just the Auth, then silence).
  auto conn = kv::FrameConnection::Connect("127.0.0.1", port.peer().port,
                                           absl::Seconds(5), tls());
  ASSERT_TRUE(conn.ok()) << conn.status();
  auto hello = (*conn)->Receive(absl::Seconds(5));
  ASSERT_TRUE(hello.ok()) << hello.status();
  ASSERT_TRUE(
      (*conn)
          ->Send(kv::Auth{Secret().KvProof(std::get<kv::Hello>(*hello).nonce)},
                 absl::Seconds(5))
          .ok());
  WaitFor([&] { return port.gate().admission().transfers() == 1; });
  const absl::Status s = SendOne(sender, host, port, RequestId(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(kKvAtCapacity), std::string::npos) << s;
  const std::vector<std::string> refused = host.refused();
  EXPECT_EQ(std::count(refused.begin(), refused.end(), "connection cap"),
            KvSender::kDefaultSendAttempts);
  EXPECT_EQ(host.delivered(), 1);
}

INSTANTIATE_TEST_SUITE_P(PlainAndMutualTls, KvSessionTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "MutualTls" : "Plain";
                         });

// A decode node that reads a kept session's next Metadata and then closes
// without a word (it went away between transfers): the sender opens a new
// connection and the transfer goes through there, once.
TEST(KvSessionRaceTest, ASessionClosedBeforeAnyAnswerIsReplacedOnce) {
  FakeHost host;
  KvReceiverOptions ro;
  ro.secret = &Secret();
  ro.geometry = Geometry();
  ro.frame_timeout = absl::Seconds(5);
  const KvReceiver receiver(&host, ro);
  auto listener = kv::FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  std::atomic<int> accepted{0};
  std::thread decode([&] {
    // The first connection: one transfer, then the next one's first bytes
    // read and the connection closed.
    auto first = (*listener)->Accept(absl::Seconds(5));
    ASSERT_TRUE(first.ok());
    ++accepted;
    RequestId id;
    bool claimed = false;
    ASSERT_TRUE(receiver.Receive(**first, &id, &claimed).ok());
    ASSERT_TRUE((*first)->Send(kv::Ack{id, 0, ""}, absl::Seconds(5)).ok());
    ASSERT_TRUE((*first)->AwaitFrame(absl::Seconds(5)).ok());
    first->reset();
    // The second: the transfer again, whole.
    auto second = (*listener)->Accept(absl::Seconds(5));
    ASSERT_TRUE(second.ok());
    ++accepted;
    ASSERT_TRUE(receiver.Receive(**second, &id, &claimed).ok());
    ASSERT_TRUE((*second)->Send(kv::Ack{id, 0, ""}, absl::Seconds(5)).ok());
  });
  const KvSender sender(&Secret(), absl::Seconds(5));
  const KvPeer peer{"decode-0", "127.0.0.1", (*listener)->port()};
  for (int i = 1; i <= 2; ++i) {
    const Transfer t = MakeTransfer(RequestId(i), Reserve(host, RequestId(i)));
    uint64_t sent = 0;
    EXPECT_TRUE(
        sender.Send(peer, t.meta, t.pages, 1, TransferDamage::kNone, &sent)
            .ok())
        << i;
  }
  decode.join();
  EXPECT_EQ(accepted.load(), 2);
  EXPECT_EQ(host.delivered(), 2);
  EXPECT_EQ(sender.opened(), 2u);
  EXPECT_EQ(sender.reused(), 1u);
}

}  // namespace
}  // namespace kvcanary::engine
