// Frame connections over mutual TLS (kv_tls_stream.h under
// FrameConnection): frames both ways, batches of pages, a send and a
// receive at once, handshakes refused or timed out, and shutdown.
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/tls.h"
#include "engine/transfer/kv_connection.h"
#include "gtest/gtest.h"
#include "tests/common/tls_fixtures.h"
#include "tests/engine/kv_connection_test_util.h"

namespace kvcanary::engine::kv {
namespace {

using kvtest::BigPage;
using kvtest::EncodeAll;
using kvtest::EncodedSize;
using kvtest::kLong;
using kvtest::ManyPages;
using kvtest::RawConnect;
using kvtest::WriteAll;

// A pair over mutual TLS: the client connects with `client_ctx` while the
// server accepts and runs AcceptTls with `server_ctx`. Either may be null
// on failure; the statuses say why.
struct TlsPair {
  std::unique_ptr<FrameListener> listener;
  std::unique_ptr<FrameConnection> client;
  std::unique_ptr<FrameConnection> server;
  absl::Status client_status;
  absl::Status server_status;
};
TlsPair ConnectedTls(const tls::Context* server_ctx,
                     const tls::Context* client_ctx,
                     absl::Duration timeout = absl::Seconds(5)) {
  TlsPair p;
  auto listener = FrameListener::Listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok());
  p.listener = std::move(*listener);
  std::thread accept([&] {
    auto server = p.listener->Accept(timeout);
    p.server_status = server.status();
    if (!server.ok()) return;
    p.server_status = (*server)->AcceptTls(*server_ctx, timeout);
    p.server = std::move(*server);
  });
  auto client = FrameConnection::Connect("127.0.0.1", p.listener->port(),
                                         timeout, client_ctx);
  p.client_status = client.status();
  if (client.ok()) p.client = std::move(*client);
  if (!p.client_status.ok()) {
    p.client.reset();  // the server hears the refusal
  }
  accept.join();
  return p;
}

class FrameConnectionTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = tls::Context::Load(deployment_.files);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = *ctx;
  }
  tls::testing::Deployment deployment_;
  std::shared_ptr<const tls::Context> ctx_;
};

TEST_F(FrameConnectionTlsTest, SendsAndReceivesFramesBothWays) {
  TlsPair p = ConnectedTls(ctx_.get(), ctx_.get());
  ASSERT_TRUE(p.client_status.ok()) << p.client_status;
  ASSERT_TRUE(p.server_status.ok()) << p.server_status;
  EXPECT_TRUE(p.client->uses_tls() && p.server->uses_tls());
  Metadata m;
  m.request = RequestId(11);
  m.reserved_pages = 2;
  // A 4 MiB page: many TLS records, written while the receiver drains.
  const std::vector<Frame> sent = {m, BigPage(16384, 'b'), BigPage(3, 'c'),
                                   Commit{RequestId(11), 2, 40, 17}};
  std::thread sender([&] {
    for (const Frame& f : sent) ASSERT_TRUE(p.client->Send(f, kLong).ok());
  });
  size_t total = 0;
  for (const Frame& want : sent) {
    absl::StatusOr<Frame> got = p.server->Receive(kLong);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(TypeOf(*got), TypeOf(want));
    if (const auto* page = std::get_if<Page>(&*got)) {
      EXPECT_EQ(page->kv_bytes, std::get<Page>(want).kv_bytes);
    }
    total += EncodedSize(want);
  }
  sender.join();
  ASSERT_TRUE(p.server->Send(Ack{RequestId(11), 0, ""}, kLong).ok());
  absl::StatusOr<Frame> ack = p.client->Receive(kLong);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(std::get<Ack>(*ack).request, RequestId(11));
  // The counters count frame bytes, not TLS records.
  EXPECT_EQ(p.client->bytes_sent(), total);
  EXPECT_EQ(p.server->bytes_received(), total);
}

// Over TLS a batch is one buffer for the session: the same frames arrive,
// and the counters count frame bytes.
TEST_F(FrameConnectionTlsTest, SendPagesInBatchesArriveWhole) {
  TlsPair p = ConnectedTls(ctx_.get(), ctx_.get());
  ASSERT_TRUE(p.client && p.server);
  std::vector<Page> pages = ManyPages(300);
  pages.insert(pages.begin() + 3, BigPage(16384, 'q'));
  std::thread sender(
      [&] { ASSERT_TRUE(p.client->SendPages(pages, kLong).ok()); });
  for (const Page& want : pages) {
    absl::StatusOr<Frame> got = p.server->Receive(kLong);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(std::get<Page>(*got).kv_bytes, want.kv_bytes);
  }
  sender.join();
  EXPECT_EQ(p.client->bytes_sent(), EncodeAll(pages).size());
  EXPECT_EQ(p.server->bytes_received(), EncodeAll(pages).size());
}

TEST_F(FrameConnectionTlsTest,
       SendPagesTimingOutMidBatchLeavesTheStreamFailed) {
  TlsPair p = ConnectedTls(ctx_.get(), ctx_.get());
  ASSERT_TRUE(p.client && p.server);
  const absl::Status status =
      p.client->SendPages(ManyPages(6000), absl::Milliseconds(200));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(p.client->Send(Commit{}, kLong).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(FrameConnectionTlsTest, ASendAndAReceiveOnOneConnectionRunAtOnce) {
  TlsPair p = ConnectedTls(ctx_.get(), ctx_.get());
  ASSERT_TRUE(p.client && p.server);
  // The client sends 64 pages while it also waits for the server's frame;
  // the server answers in the middle of the stream.
  std::thread client_sender([&] {
    for (int i = 0; i < 64; ++i) {
      ASSERT_TRUE(p.client->Send(BigPage(256, 'p'), kLong).ok());
    }
  });
  absl::StatusOr<Frame> answer;
  std::thread client_receiver([&] { answer = p.client->Receive(kLong); });
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(p.server->Receive(kLong).ok());
  ASSERT_TRUE(p.server->Send(Abort{RequestId(3), 10, "enough"}, kLong).ok());
  for (int i = 32; i < 64; ++i) ASSERT_TRUE(p.server->Receive(kLong).ok());
  client_sender.join();
  client_receiver.join();
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(std::get<Abort>(*answer).message, "enough");
}

TEST_F(FrameConnectionTlsTest, APlainPeerFailsTheHandshake) {
  auto listener = FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const int fd = RawConnect((*listener)->port());
  std::string frame;
  EncodeFrame(Commit{RequestId(1), 1, 1, 1}, &frame);
  WriteAll(fd, frame);
  auto server = (*listener)->Accept(kLong);
  ASSERT_TRUE(server.ok());
  const absl::Status st = (*server)->AcceptTls(*ctx_, absl::Seconds(5));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  ::close(fd);
}

TEST_F(FrameConnectionTlsTest, ASilentPeerTimesOutTheHandshake) {
  auto listener = FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok());
  const int fd = RawConnect((*listener)->port());
  auto server = (*listener)->Accept(kLong);
  ASSERT_TRUE(server.ok());
  const absl::Status st = (*server)->AcceptTls(*ctx_, absl::Milliseconds(100));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  ::close(fd);
}

TEST_F(FrameConnectionTlsTest, AServerOfAnotherDeploymentIsRefused) {
  tls::testing::Deployment other;
  auto other_ctx = tls::Context::Load(other.files);
  ASSERT_TRUE(other_ctx.ok());
  TlsPair p = ConnectedTls(other_ctx->get(), ctx_.get());
  EXPECT_EQ(p.client_status.code(), absl::StatusCode::kUnavailable)
      << p.client_status;
  EXPECT_FALSE(p.server_status.ok());
}

TEST_F(FrameConnectionTlsTest, PeerClosingMidFrameIsDataLoss) {
  TlsPair p = ConnectedTls(ctx_.get(), ctx_.get());
  ASSERT_TRUE(p.client && p.server);
  std::string frame;
  EncodeFrame(BigPage(64, 'h'), &frame);
  ASSERT_TRUE(p.client->SendRaw(frame.substr(0, frame.size() / 2), kLong).ok());
  p.client->Shutdown();
  EXPECT_EQ(p.server->Receive(kLong).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(FrameConnectionTlsTest, ShutdownFromAnotherThreadUnblocksReceive) {
  TlsPair p = ConnectedTls(ctx_.get(), ctx_.get());
  ASSERT_TRUE(p.client && p.server);
  absl::Status status;
  std::thread receiver(
      [&] { status = p.server->Receive(absl::InfiniteDuration()).status(); });
  absl::SleepFor(absl::Milliseconds(100));
  p.server->Shutdown();
  receiver.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

}  // namespace
}  // namespace kvcanary::engine::kv
