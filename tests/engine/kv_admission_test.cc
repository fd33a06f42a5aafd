// KvAdmission's caps and pools, and KvGate with a KvSender over real
// sockets on 127.0.0.1: a transfer refused for capacity after its Auth is
// answered RESOURCE_EXHAUSTED, and the sender, after its retries, says so.
#include "engine/transfer/kv_admission.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "engine/transfer/kv_sender.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

KvAdmissionOptions Options() {
  KvAdmissionOptions o;
  o.max_transfers = 2;
  o.max_unauthenticated = 6;
  o.max_unauthenticated_per_peer = 2;
  o.reserved_unauthenticated = 2;
  o.reserved_addresses = {"10.0.0.9"};
  return o;
}

TEST(KvAdmissionTest, PerPeerCapRefusesOneMoreFromTheSameAddress) {
  KvAdmission a(Options());
  const char* reason = "";
  auto h1 = a.Admit("10.0.0.1", &reason);
  auto h2 = a.Admit("10.0.0.1", &reason);
  ASSERT_NE(h1, nullptr);
  ASSERT_NE(h2, nullptr);
  EXPECT_EQ(a.Admit("10.0.0.1", &reason), nullptr);
  EXPECT_STREQ(reason, "peer cap");
  EXPECT_NE(a.Admit("10.0.0.2", &reason), nullptr);  // another address
  h1.reset();
  EXPECT_NE(a.Admit("10.0.0.1", &reason), nullptr);  // a place came free
}

TEST(KvAdmissionTest, TotalCapRefusesPastIt) {
  KvAdmission a(Options());
  const char* reason = "";
  std::vector<std::unique_ptr<KvAdmission::Hold>> held;
  for (int i = 0; i < 6; ++i) {
    held.push_back(a.Admit("10.0.1." + std::to_string(i), &reason));
    ASSERT_NE(held.back(), nullptr);
  }
  EXPECT_EQ(a.Admit("10.0.2.1", &reason), nullptr);
  EXPECT_STREQ(reason, "pre-auth cap");
  EXPECT_EQ(a.unauthenticated(), 6);
}

TEST(KvAdmissionTest, PrefillAddressesKeepTheirPoolWhenOthersFillTheirs) {
  KvAdmission a(Options());
  const char* reason = "";
  std::vector<std::unique_ptr<KvAdmission::Hold>> held;
  for (int i = 0; i < 6; ++i) {
    held.push_back(a.Admit("10.0.1." + std::to_string(i), &reason));
  }
  // Its own pool (2), with no per-peer cap; then it shares the general one.
  auto r1 = a.Admit("10.0.0.9", &reason);
  auto r2 = a.Admit("10.0.0.9", &reason);
  EXPECT_NE(r1, nullptr);
  EXPECT_NE(r2, nullptr);
  EXPECT_EQ(a.Admit("10.0.0.9", &reason), nullptr);
  EXPECT_STREQ(reason, "pre-auth cap");
  held.clear();
  auto r3 = a.Admit("10.0.0.9", &reason);
  auto r4 = a.Admit("10.0.0.9", &reason);
  auto r5 = a.Admit("10.0.0.9", &reason);
  EXPECT_NE(r5, nullptr);
  EXPECT_EQ(a.unauthenticated(), 5);
}

TEST(KvAdmissionTest, ATransferSlotIsTakenOnlyOnceAuthenticated) {
  KvAdmission a(Options());
  const char* reason = "";
  std::vector<std::unique_ptr<KvAdmission::Hold>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(a.Admit("10.0.1." + std::to_string(i), &reason));
  }
  EXPECT_EQ(a.transfers(), 0);
  EXPECT_TRUE(held[0]->Authenticated());
  EXPECT_TRUE(held[1]->Authenticated());
  EXPECT_FALSE(held[2]->Authenticated());  // two slots
  EXPECT_EQ(a.transfers(), 2);
  EXPECT_EQ(a.unauthenticated(), 0);
  held.clear();
  EXPECT_EQ(a.transfers(), 0);
}

TEST(KvAdmissionTest, ResolvesLiteralAddressesAndNames) {
  auto ips = ResolveHosts({"127.0.0.1", "localhost"});
  ASSERT_TRUE(ips.ok()) << ips.status();
  EXPECT_NE(std::find(ips->begin(), ips->end(), "127.0.0.1"), ips->end());
  EXPECT_FALSE(ResolveHosts({"no-such-host.invalid"}).ok());
}

// A host with no reservations, counting refusals.
class CountingHost : public KvReceiverHost {
 public:
  std::unique_ptr<KvClaim> Claim(const kv::Metadata&) override {
    return nullptr;
  }
  void Refused(const char* reason) override {
    absl::MutexLock lock(&mu_);
    refused_.emplace_back(reason);
  }
  void Violation(const WatermarkViolation&) override {}
  void Committed(const TraceEvent&) override {}
  std::vector<std::string> refused() {
    absl::MutexLock lock(&mu_);
    return refused_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> refused_ ABSL_GUARDED_BY(mu_);
};

// The KV port with its one transfer slot taken by an authenticated
// connection that says nothing; a sender making `attempts` tries (0: the
// default) is refused for capacity after its Auth each time. Checks the
// refusal, and that it tried exactly that often.
void SenderRefusedForCapacity(int attempts) {
  const int expected = attempts > 0 ? attempts : KvSender::kDefaultSendAttempts;
  const SharedSecret secret = SharedSecret::FromString(std::string(40, 's'));
  CountingHost host;
  KvReceiverOptions ro;
  ro.secret = &secret;
  ro.geometry.page_tokens = 4;
  ro.geometry.n_layers = 1;
  ro.geometry.kv_heads = 1;
  ro.geometry.head_dim = 2;
  ro.geometry.vocab_size = 32;
  KvReceiver receiver(&host, ro);
  KvAdmissionOptions ao;
  ao.max_transfers = 1;
  // The connection taking the slot is the test's own, authenticated by
  // hand: a loaded machine must not make it miss the 200 ms deadline.
  ao.auth_deadline = absl::Seconds(10);
  KvGate gate(ao, &host, &receiver, nullptr);
  auto listener = kv::FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  // The door, one connection at a time; authenticated ones are kept.
  std::vector<std::pair<std::unique_ptr<kv::FrameConnection>,
                        std::unique_ptr<KvAdmission::Hold>>>
      kept;
  int accepted = 0;
  std::atomic<bool> stop{false};
  std::thread door([&] {
    while (!stop) {
      auto conn = (*listener)->Accept(absl::Milliseconds(50));
      if (!conn.ok()) continue;
      ++accepted;
      auto hold = gate.Admit(**conn);
      if (hold == nullptr) continue;
      if (gate.Authenticate(**conn, *hold, absl::Now() + ao.auth_deadline)
              .ok()) {
        kept.emplace_back(std::move(*conn), std::move(hold));
      }
    }
  });
  // The only slot, taken by an authenticated connection that says nothing.
  auto first = kv::FrameConnection::Connect("127.0.0.1", (*listener)->port(),
                                            absl::Seconds(5));
  ASSERT_TRUE(first.ok());
  auto hello = (*first)->Receive(absl::Seconds(5));
  ASSERT_TRUE(hello.ok());
  ASSERT_TRUE(
      (*first)
          ->Send(kv::Auth{secret.KvProof(std::get<kv::Hello>(*hello).nonce)},
                 absl::Seconds(5))
          .ok());
  while (gate.admission().transfers() == 0) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  // A sender now: refused for capacity after its Auth, every try.
  KvSender sender(&secret, absl::Seconds(5));
  if (attempts > 0) sender.set_send_attempts(attempts);
  kv::Metadata meta;
  meta.request = RequestId(5);
  uint64_t sent = 0;
  const absl::Status s =
      sender.Send(KvPeer{"decode-0", "127.0.0.1", (*listener)->port()}, meta,
                  {}, 1, TransferDamage::kNone, &sent);
  stop = true;
  door.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find(kKvAtCapacity), std::string::npos) << s;
  EXPECT_EQ(accepted, 1 + expected);
  const std::vector<std::string> refused = host.refused();
  EXPECT_EQ(std::count(refused.begin(), refused.end(), "connection cap"),
            expected);
}

TEST(KvGateTest, TransferSlotsFullIsResourceExhaustedAndTheSenderSaysSo) {
  SenderRefusedForCapacity(0);
}

TEST(KvGateTest, TheSenderTriesAsOftenAsItIsTold) {
  SenderRefusedForCapacity(2);
}

}  // namespace
}  // namespace kvcanary::engine
