#include "engine/transfer/kv_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/common/tls_fixtures.h"

namespace kvcanary::engine::kv {
namespace {

const absl::Duration kLong = absl::Seconds(20);

struct Pair {
  std::unique_ptr<FrameListener> listener;
  std::unique_ptr<FrameConnection> client;
  std::unique_ptr<FrameConnection> server;
};

// A connected client/server pair on 127.0.0.1, port chosen by the kernel.
Pair Connected() {
  Pair p;
  absl::StatusOr<std::unique_ptr<FrameListener>> listener =
      FrameListener::Listen("127.0.0.1", 0);
  EXPECT_TRUE(listener.ok()) << listener.status();
  if (!listener.ok()) return p;
  p.listener = std::move(*listener);
  EXPECT_GT(p.listener->port(), 0);
  absl::StatusOr<std::unique_ptr<FrameConnection>> client =
      FrameConnection::Connect("127.0.0.1", p.listener->port(), kLong);
  EXPECT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::unique_ptr<FrameConnection>> server =
      p.listener->Accept(kLong);
  EXPECT_TRUE(server.ok()) << server.status();
  if (client.ok()) p.client = std::move(*client);
  if (server.ok()) p.server = std::move(*server);
  return p;
}

// A plain TCP socket connected to the listener, for writing raw bytes.
int RawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

void WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
}

Page BigPage(uint32_t slots, char fill) {
  Page p;
  p.index = slots;
  p.layer = 1;
  p.slots = slots;
  p.kv_bytes.assign(size_t{2} * slots * 4 * 8 * 4, fill);
  return p;
}

size_t EncodedSize(const Frame& f) {
  std::string out;
  EncodeFrame(f, &out);
  return out.size();
}

TEST(FrameConnectionTest, SendsAndReceivesFramesBothWays) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  Metadata m;
  m.request = RequestId(11);
  m.reserved_pages = 3;
  // 16384 slots: a 4 MiB page, larger than the socket buffers, so Send
  // writes it in pieces while the receiver drains it.
  const std::vector<Frame> sent = {m, BigPage(16, 'a'), BigPage(16384, 'b'),
                                   BigPage(0, 'c'),
                                   Commit{RequestId(11), 3, 40, 17}};
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
      EXPECT_EQ(page->slots, std::get<Page>(want).slots);
    }
    total += EncodedSize(want);
  }
  sender.join();
  EXPECT_EQ(std::get<Commit>(sent.back()).first_token, 17);

  ASSERT_TRUE(p.server->Send(Ack{RequestId(11), 0, ""}, kLong).ok());
  ASSERT_TRUE(p.server->Send(Abort{RequestId(11), 10, "late"}, kLong).ok());
  absl::StatusOr<Frame> ack = p.client->Receive(kLong);
  ASSERT_TRUE(ack.ok()) << ack.status();
  EXPECT_EQ(std::get<Ack>(*ack).request, RequestId(11));
  absl::StatusOr<Frame> abort = p.client->Receive(kLong);
  ASSERT_TRUE(abort.ok()) << abort.status();
  EXPECT_EQ(std::get<Abort>(*abort).message, "late");

  EXPECT_EQ(p.client->bytes_sent(), total);
  EXPECT_EQ(p.server->bytes_received(), total);
  EXPECT_EQ(p.server->bytes_sent(), p.client->bytes_received());
}

TEST(FrameConnectionTest, ReceiveTimeoutIsDeadlineExceededAndRetryable) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  const absl::Time start = absl::Now();
  absl::StatusOr<Frame> got = p.server->Receive(absl::Milliseconds(100));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(90));
  ASSERT_TRUE(p.client->Send(Commit{RequestId(1), 0, 0, 5}, kLong).ok());
  got = p.server->Receive(kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::get<Commit>(*got).first_token, 5);
}

TEST(FrameConnectionTest, PeerCloseAtFrameBoundaryIsUnavailable) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_TRUE(p.client->Send(Commit{RequestId(1), 0, 0, 5}, kLong).ok());
  p.client.reset();
  EXPECT_TRUE(p.server->Receive(kLong).ok());
  absl::StatusOr<Frame> got = p.server->Receive(kLong);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable)
      << got.status();
  // Final: a second call says the same.
  EXPECT_EQ(p.server->Receive(kLong).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(FrameConnectionTest, PeerClosingMidFrameIsDataLoss) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener =
      FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int fd = RawConnect((*listener)->port());
  absl::StatusOr<std::unique_ptr<FrameConnection>> server =
      (*listener)->Accept(kLong);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string bytes;
  EncodeFrame(BigPage(16, 'x'), &bytes);
  WriteAll(fd, bytes.substr(0, bytes.size() / 2));
  ::close(fd);
  absl::StatusOr<Frame> got = (*server)->Receive(kLong);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_NE(got.status().message().find("mid-frame"), absl::string_view::npos);
}

TEST(FrameConnectionTest, SendRawHalfAFrameThenShutdownIsDataLossForThePeer) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  std::string bytes;
  EncodeFrame(BigPage(16, 'x'), &bytes);
  ASSERT_TRUE(p.client->SendRaw(bytes.substr(0, 100), kLong).ok());
  p.client->Shutdown();
  absl::StatusOr<Frame> got = p.server->Receive(kLong);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_EQ(p.client->bytes_sent(), 100u);
}

TEST(FrameConnectionTest, CorruptFrameOnTheWireIsDataLoss) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener =
      FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int fd = RawConnect((*listener)->port());
  absl::StatusOr<std::unique_ptr<FrameConnection>> server =
      (*listener)->Accept(kLong);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string bytes;
  EncodeFrame(BigPage(16, 'x'), &bytes);
  bytes[100] ^= 0x10;
  WriteAll(fd, bytes);
  absl::StatusOr<Frame> got = (*server)->Receive(kLong);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  ::close(fd);
}

TEST(FrameConnectionTest, ShutdownFromAnotherThreadUnblocksReceive) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  absl::Status status;
  std::thread receiver(
      [&] { status = p.server->Receive(absl::InfiniteDuration()).status(); });
  absl::SleepFor(absl::Milliseconds(100));
  p.server->Shutdown();
  receiver.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  // The peer sees the connection end at a frame boundary.
  EXPECT_EQ(p.client->Receive(kLong).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(FrameConnectionTest, ShutdownFromAnotherThreadUnblocksSend) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  absl::Status status;
  // 32 MiB that nobody reads: Send blocks once the socket buffers fill.
  std::thread sender([&] {
    status = p.client->Send(BigPage(1 << 17, 'z'), absl::InfiniteDuration());
  });
  absl::SleepFor(absl::Milliseconds(200));
  p.client->Shutdown();
  sender.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(p.client->Send(Commit{}, kLong).code(),
            absl::StatusCode::kCancelled);
}

TEST(FrameConnectionTest, ConnectToAClosedPortIsUnavailable) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener =
      FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int port = (*listener)->port();
  listener->reset();
  absl::StatusOr<std::unique_ptr<FrameConnection>> c =
      FrameConnection::Connect("127.0.0.1", port, kLong);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable) << c.status();
}

TEST(FrameConnectionTest, ConnectToABadPortIsInvalidArgument) {
  EXPECT_EQ(FrameConnection::Connect("127.0.0.1", 0, kLong).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FrameConnection::Connect("127.0.0.1", 70000, kLong).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FrameListenerTest, AcceptTimesOutWithDeadlineExceeded) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener =
      FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  EXPECT_EQ((*listener)->Accept(absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(FrameListenerTest, CloseFromAnotherThreadUnblocksAccept) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener =
      FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  absl::Status status;
  std::thread acceptor(
      [&] { status = (*listener)->Accept(absl::InfiniteDuration()).status(); });
  absl::SleepFor(absl::Milliseconds(100));
  (*listener)->Close();
  acceptor.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ((*listener)->Accept(kLong).status().code(),
            absl::StatusCode::kCancelled);
}

TEST(FrameConnectionTest, FromFdCarriesFramesOverASocketPair) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::unique_ptr<FrameConnection> a = FrameConnection::FromFd(fds[0]);
  std::unique_ptr<FrameConnection> b = FrameConnection::FromFd(fds[1]);
  ASSERT_TRUE(a->Send(Ack{RequestId(3), 0, "ok"}, kLong).ok());
  absl::StatusOr<Frame> got = b->Receive(kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::get<Ack>(*got).message, "ok");
}

// --- Mutual TLS ---------------------------------------------------------

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
