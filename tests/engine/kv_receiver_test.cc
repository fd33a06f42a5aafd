// KvReceiver on its own: one transfer per socketpair, the sender played by
// the test over a FrameConnection, the decode node's reservations by a fake
// host. No node is started.
#include "engine/transfer/kv_receiver.h"

#include <sys/socket.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/engine/kv_fake_host.h"

namespace kvcanary::engine {
namespace {

using kvtest::FakeHost;
using kvtest::FakeReservation;

const absl::Duration kTimeout = absl::Seconds(10);
const RequestId kRequest(7);
const TenantId kTenant(3);
constexpr int kPromptTokens = 5;  // two pages of 4 tokens, the second half
constexpr int kFirstToken = 11;

KvGeometry Geometry() {
  KvGeometry g;
  g.page_tokens = 4;
  g.n_layers = 2;
  g.kv_heads = 1;
  g.head_dim = 2;
  g.vocab_size = 32;
  return g;
}

// The reservation the tests transfer into: kPromptTokens for (kTenant,
// kRequest).
KvReservation TheReservation() {
  KvReservation r;
  r.request = kRequest;
  r.tenant = kTenant;
  r.prompt_tokens = kPromptTokens;
  r.prompt_pages = Geometry().PagesFor(kPromptTokens);
  r.reserved_pages = 4;
  return r;
}

kv::Metadata Meta(const TransferToken& token) {
  const KvGeometry g = Geometry();
  kv::Metadata m;
  m.request = kRequest;
  m.tenant = kTenant;
  m.prompt_tokens = kPromptTokens;
  m.reserved_pages = 4;
  m.page_tokens = g.page_tokens;
  m.n_layers = g.n_layers;
  m.kv_heads = g.kv_heads;
  m.head_dim = g.head_dim;
  m.transfer_token = token;
  return m;
}

// Page `index` of `layer`, holding the prompt's slots in it, written by
// (tenant, request).
kv::Page PromptPage(uint32_t index, uint32_t layer, TenantId tenant,
                    RequestId request) {
  const KvGeometry g = Geometry();
  kv::Page p;
  p.index = index;
  p.layer = layer;
  p.slots = std::min<uint32_t>(g.page_tokens, kPromptTokens - index * 4);
  p.stamp.layer = static_cast<uint16_t>(layer);
  p.stamp.page = PageId(100 + index);
  p.stamp.owner = StampIdentity{request, tenant, PageGeneration(1)};
  p.stamp.writer = p.stamp.owner;
  p.stamp.filled = p.slots;
  p.kv_bytes.assign(2 * p.slots * g.row_bytes(), '\x01');
  return p;
}

// Every prompt page of every layer, all written by this request.
std::vector<kv::Frame> AllPages() {
  std::vector<kv::Frame> pages;
  for (uint32_t index = 0; index < 2; ++index) {
    for (uint32_t layer = 0; layer < 2; ++layer) {
      pages.push_back(PromptPage(index, layer, kTenant, kRequest));
    }
  }
  return pages;
}

kv::Commit CommitOf(uint32_t pages_sent) {
  kv::Commit c;
  c.request = kRequest;
  c.pages_sent = pages_sent;
  c.tokens_sent = kPromptTokens;
  c.first_token = kFirstToken;
  return c;
}

// What Receive returned.
struct Receipt {
  absl::Status verdict;
  RequestId id;
  bool claimed = false;
};

class KvReceiverTest : public ::testing::Test {
 protected:
  KvReceiverTest()
      : secret_(SharedSecret::FromString(std::string(40, 's'))),
        receiver_(&host_, Options()) {}

  KvReceiverOptions Options() {
    KvReceiverOptions o;
    o.secret = &secret_;
    o.geometry = Geometry();
    o.auth_timeout = kTimeout;
    o.frame_timeout = kTimeout;
    return o;
  }

  // One connection: the receiver on its own thread, this thread the
  // sender, which answers the Hello with `proof_secret`'s proof and sends
  // `frames`. A receiver that stops early leaves the rest unread.
  Receipt Transfer(const SharedSecret& proof_secret,
                   const std::vector<kv::Frame>& frames) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    std::unique_ptr<kv::FrameConnection> sender =
        kv::FrameConnection::FromFd(fds[0]);
    std::unique_ptr<kv::FrameConnection> server =
        kv::FrameConnection::FromFd(fds[1]);
    Receipt receipt;
    std::thread receiving([&] {
      receipt.verdict =
          receiver_.Receive(*server, &receipt.id, &receipt.claimed);
      server->Shutdown();  // the sender's pending sends end
    });
    auto hello = sender->Receive(kTimeout);
    EXPECT_TRUE(hello.ok()) << hello.status();
    if (hello.ok() && std::holds_alternative<kv::Hello>(*hello)) {
      const auto& nonce = std::get<kv::Hello>(*hello).nonce;
      absl::Status s =
          sender->Send(kv::Auth{proof_secret.KvProof(nonce)}, kTimeout);
      for (size_t i = 0; s.ok() && i < frames.size(); ++i) {
        s = sender->Send(frames[i], kTimeout);
      }
    }
    receiving.join();
    return receipt;
  }
  Receipt Transfer(const std::vector<kv::Frame>& frames) {
    return Transfer(secret_, frames);
  }

  // Metadata with `token`, every prompt page (`pages`, unless given), and
  // a Commit of as many pages.
  static std::vector<kv::Frame> Frames(
      const TransferToken& token, std::vector<kv::Frame> pages = AllPages()) {
    const uint32_t sent = static_cast<uint32_t>(pages.size());
    pages.insert(pages.begin(), Meta(token));
    pages.emplace_back(std::in_place_type<kv::Commit>, CommitOf(sent));
    return pages;
  }

  SharedSecret secret_;
  FakeHost host_;
  KvReceiver receiver_;
};

TEST_F(KvReceiverTest, GoodTransferIsHandedOver) {
  const TransferToken token = host_.Reserve(TheReservation());
  const Receipt r = Transfer(Frames(token));
  ASSERT_TRUE(r.verdict.ok()) << r.verdict;
  EXPECT_TRUE(r.claimed);
  EXPECT_EQ(r.id, kRequest);
  const FakeReservation got = host_.Get(kRequest);
  EXPECT_FALSE(got.failed.has_value());
  ASSERT_TRUE(got.handed_over.has_value());
  EXPECT_EQ(got.handed_over->request, kRequest);
  EXPECT_EQ(got.handed_over->first_token, kFirstToken);
  EXPECT_EQ(got.handed_over->computed_tokens, kPromptTokens);
  EXPECT_EQ(got.handed_over->pages.size(), 4u);
  ASSERT_EQ(host_.commits().size(), 1u);
  EXPECT_TRUE(host_.commits()[0].ok);
  EXPECT_TRUE(host_.violations().empty());
  EXPECT_TRUE(host_.refused().empty());
}

TEST_F(KvReceiverTest, WrongTokenAbortsOnlyThatConnectionNotTheReservation) {
  const TransferToken token = host_.Reserve(TheReservation());
  TransferToken wrong = token;
  wrong[0] ^= 0x01;
  const Receipt refused = Transfer(Frames(wrong));
  EXPECT_EQ(refused.verdict.code(), absl::StatusCode::kPermissionDenied)
      << refused.verdict;
  EXPECT_FALSE(refused.claimed);
  EXPECT_EQ(refused.id, kNoRequest);  // the Abort names no request
  EXPECT_EQ(host_.refused(),
            std::vector<std::string>{"no matching reservation"});
  // The reservation is untouched and still claimable with its token.
  FakeReservation after = host_.Get(kRequest);
  EXPECT_FALSE(after.claimed);
  EXPECT_FALSE(after.failed.has_value());
  EXPECT_FALSE(after.handed_over.has_value());
  const Receipt good = Transfer(Frames(token));
  ASSERT_TRUE(good.verdict.ok()) << good.verdict;
  EXPECT_TRUE(host_.Get(kRequest).handed_over.has_value());
}

TEST_F(KvReceiverTest, RefusalSaysTheSameForAnUnknownRequest) {
  const TransferToken token = host_.Reserve(TheReservation());
  TransferToken wrong = token;
  wrong[15] ^= 0x80;
  const Receipt wrong_token = Transfer({Meta(wrong)});
  kv::Metadata unknown = Meta(token);
  unknown.request = RequestId(8);
  const Receipt unknown_id = Transfer({unknown});
  EXPECT_EQ(wrong_token.verdict, unknown_id.verdict);
  EXPECT_FALSE(host_.Get(kRequest).claimed);
}

TEST_F(KvReceiverTest, SecondClaimOfATakenReservationIsRefused) {
  const TransferToken token = host_.Reserve(TheReservation());
  ASSERT_TRUE(Transfer(Frames(token)).verdict.ok());
  const Receipt again = Transfer(Frames(token));
  EXPECT_EQ(again.verdict.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(again.claimed);
}

TEST_F(KvReceiverTest, WrongSecretFailsTheHandshake) {
  const TransferToken token = host_.Reserve(TheReservation());
  const Receipt r =
      Transfer(SharedSecret::FromString(std::string(40, 'x')), Frames(token));
  EXPECT_EQ(r.verdict.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE(r.claimed);
  EXPECT_EQ(host_.refused(), std::vector<std::string>{"authentication"});
  EXPECT_FALSE(host_.Get(kRequest).claimed);
}

TEST_F(KvReceiverTest, PageStampedByAnotherTenantIsRefused) {
  const TransferToken token = host_.Reserve(TheReservation());
  std::vector<kv::Frame> pages = AllPages();
  pages[1] = PromptPage(0, 1, TenantId(4), kRequest);
  const Receipt r = Transfer(Frames(token, pages));
  EXPECT_EQ(r.verdict.code(), absl::StatusCode::kDataLoss) << r.verdict;
  EXPECT_TRUE(r.claimed);
  const FakeReservation got = host_.Get(kRequest);
  ASSERT_TRUE(got.failed.has_value());
  EXPECT_EQ(*got.failed, r.verdict);
  EXPECT_FALSE(got.handed_over.has_value());
  ASSERT_EQ(host_.violations().size(), 1u);
  EXPECT_EQ(host_.violations()[0].kind, ViolationKind::kForeignTenantRead);
  EXPECT_EQ(host_.violations()[0].writer.tenant, TenantId(4));
  EXPECT_EQ(host_.violations()[0].reader.request, kRequest);
}

TEST_F(KvReceiverTest, PageStampedByAnotherRequestIsRefused) {
  const TransferToken token = host_.Reserve(TheReservation());
  std::vector<kv::Frame> pages = AllPages();
  pages[2] = PromptPage(1, 0, kTenant, RequestId(6));
  const Receipt r = Transfer(Frames(token, pages));
  EXPECT_EQ(r.verdict.code(), absl::StatusCode::kDataLoss) << r.verdict;
  ASSERT_TRUE(host_.Get(kRequest).failed.has_value());
  EXPECT_FALSE(host_.Get(kRequest).handed_over.has_value());
  ASSERT_EQ(host_.violations().size(), 1u);
  EXPECT_EQ(host_.violations()[0].kind, ViolationKind::kStaleRequestRead);
}

TEST_F(KvReceiverTest, TenantsSharedPrefixIsAccepted) {
  const TransferToken token = host_.Reserve(TheReservation());
  std::vector<kv::Frame> pages = AllPages();
  kv::Page shared = PromptPage(0, 0, kTenant, RequestId(6));
  shared.stamp.set_shared(true);
  pages[0] = shared;
  const Receipt r = Transfer(Frames(token, pages));
  EXPECT_TRUE(r.verdict.ok()) << r.verdict;
  EXPECT_TRUE(host_.violations().empty());
}

TEST_F(KvReceiverTest, CommitWithFewerPagesThanReservedFails) {
  const TransferToken token = host_.Reserve(TheReservation());
  std::vector<kv::Frame> pages = AllPages();
  pages.pop_back();  // page 1 of layer 1 never sent; the Commit says 3
  const Receipt r = Transfer(Frames(token, pages));
  EXPECT_EQ(r.verdict.code(), absl::StatusCode::kDataLoss) << r.verdict;
  EXPECT_TRUE(r.claimed);
  const FakeReservation got = host_.Get(kRequest);
  ASSERT_TRUE(got.failed.has_value());
  EXPECT_FALSE(got.handed_over.has_value());
  ASSERT_EQ(host_.commits().size(), 1u);
  EXPECT_FALSE(host_.commits()[0].ok);
  EXPECT_EQ(host_.commits()[0].pages_sent, 3u);
  EXPECT_EQ(host_.commits()[0].pages_expected, 4u);
}

TEST_F(KvReceiverTest, SendersAbortFailsTheClaim) {
  const TransferToken token = host_.Reserve(TheReservation());
  kv::Abort abort;
  abort.request = kRequest;
  abort.code = static_cast<uint32_t>(absl::StatusCode::kCancelled);
  abort.message = "client gone";
  const Receipt r = Transfer({Meta(token), abort});
  EXPECT_EQ(r.verdict.code(), absl::StatusCode::kCancelled) << r.verdict;
  ASSERT_TRUE(host_.Get(kRequest).failed.has_value());
  EXPECT_EQ(host_.Get(kRequest).failed->code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace kvcanary::engine
