// Frame connections and listeners over plain TCP: frames both ways,
// timeouts, peers that close, reset or corrupt the stream, shutdown from
// another thread, adopted listening sockets, and batched page frames
// (SendPages). Over TLS: kv_tls_stream_test.cc.
#include "engine/transfer/kv_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
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

TEST(FrameListenerTest, AnAdoptedSocketKeepsListeningForItsOwnerAfterClose) {
  // `up` binds the KV port and hands a copy of the socket to each decode
  // process it starts: closing one process's listener must not stop the
  // socket listening for the next.
  absl::StatusOr<std::unique_ptr<FrameListener>> owner =
      FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(owner.ok()) << owner.status();
  absl::StatusOr<std::unique_ptr<FrameListener>> first =
      FrameListener::FromFd(::dup((*owner)->fd()));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->port(), (*owner)->port());
  absl::Status status;
  std::thread acceptor(
      [&] { status = (*first)->Accept(absl::InfiniteDuration()).status(); });
  absl::SleepFor(absl::Milliseconds(50));
  (*first)->Close();
  acceptor.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  first->reset();

  absl::StatusOr<std::unique_ptr<FrameListener>> second =
      FrameListener::FromFd(::dup((*owner)->fd()));
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<std::unique_ptr<FrameConnection>> client =
      FrameConnection::Connect("127.0.0.1", (*owner)->port(), kLong);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*second)->Accept(kLong).ok());
}

TEST(FrameListenerTest, AdoptingAnythingButAListeningSocketIsInvalidArgument) {
  EXPECT_EQ(FrameListener::FromFd(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int unbound = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(FrameListener::FromFd(unbound).status().code(),
            absl::StatusCode::kInvalidArgument);
  ::close(unbound);
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

// --- Batched page frames (SendPages) --------------------------------------

// A client FrameConnection whose peer is a plain socket the test reads.
struct RawPeer {
  std::unique_ptr<FrameConnection> client;
  int fd = -1;
  ~RawPeer() {
    if (fd >= 0) ::close(fd);
  }
};
// With `rcvbuf`, the peer's receive buffer (and so the window it offers)
// is that small from the start.
void ConnectToRaw(RawPeer& p, int rcvbuf = 0) {
  const int l = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf > 0) {
    EXPECT_EQ(::setsockopt(l, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)),
              0);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(l, 1), 0);
  EXPECT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto client =
      FrameConnection::Connect("127.0.0.1", ntohs(addr.sin_port), kLong);
  EXPECT_TRUE(client.ok()) << client.status();
  if (client.ok()) p.client = std::move(*client);
  p.fd = ::accept(l, nullptr, nullptr);
  ::close(l);
  // A test's reads give up rather than hang when the sender stops early.
  const timeval limit{20, 0};
  EXPECT_EQ(::setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit)),
            0);
}

// Reads `n` bytes from `fd` in reads of at most `chunk` bytes, sleeping
// `pause` between them.
std::string ReadBytes(int fd, size_t n, size_t chunk,
                      absl::Duration pause = absl::ZeroDuration()) {
  std::string out;
  std::vector<char> buf(chunk);
  while (out.size() < n) {
    const ssize_t got =
        ::recv(fd, buf.data(), std::min(chunk, n - out.size()), 0);
    if (got <= 0) break;
    out.append(buf.data(), static_cast<size_t>(got));
    if (pause > absl::ZeroDuration()) absl::SleepFor(pause);
  }
  return out;
}

TEST(FrameConnectionSendPagesTest, ReceivedAsTheFramesSendWouldWrite) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  // Several batches, a page with no K/V, and a 4 MiB page alone in one.
  std::vector<Page> pages = ManyPages(300);
  pages.insert(pages.begin() + 7, BigPage(0, 'z'));
  pages.insert(pages.begin() + 100, BigPage(16384, 'q'));
  std::thread sender(
      [&] { ASSERT_TRUE(p.client->SendPages(pages, kLong).ok()); });
  for (const Page& want : pages) {
    absl::StatusOr<Frame> got = p.server->Receive(kLong);
    ASSERT_TRUE(got.ok()) << got.status();
    const Page& page = std::get<Page>(*got);
    ASSERT_EQ(page.index, want.index);
    ASSERT_EQ(page.kv_bytes, want.kv_bytes);
  }
  sender.join();
  const size_t total = EncodeAll(pages).size();
  EXPECT_EQ(p.client->bytes_sent(), total);
  EXPECT_EQ(p.server->bytes_received(), total);
  // The stream goes on after the batch.
  ASSERT_TRUE(p.client->Send(Commit{RequestId(1), 302, 16, 3}, kLong).ok());
  absl::StatusOr<Frame> commit = p.server->Receive(kLong);
  ASSERT_TRUE(commit.ok()) << commit.status();
  EXPECT_EQ(std::get<Commit>(*commit).pages_sent, 302u);
}

// A reader that takes a few hundred bytes at a time makes the sender's
// writes stop anywhere: inside a head, a page's K/V or a CRC. The bytes on
// the wire are still exactly the encoded frames, in order.
TEST(FrameConnectionSendPagesTest, FramesSplitAcrossWritesAreTheEncodedBytes) {
  RawPeer p;
  // A window far below a batch: the sender's buffer fills, and each write
  // takes what the reader freed.
  ConnectToRaw(p, /*rcvbuf=*/16 << 10);
  ASSERT_TRUE(p.client && p.fd >= 0);
  const std::vector<Page> pages = ManyPages(2000);  // ~8 MB
  const std::string want = EncodeAll(pages);
  absl::Status status;
  std::thread sender([&] { status = p.client->SendPages(pages, kLong); });
  const std::string got = ReadBytes(p.fd, want.size(), 777);
  sender.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(got == want) << "the bytes differ from the encoded frames";
  EXPECT_EQ(p.client->bytes_sent(), want.size());
}

// A reader that writes frames in odd pieces, and a receiver that reads
// them in its large reads: each frame arrives whole.
TEST(FrameConnectionSendPagesTest, FramesWrittenInPiecesAreReceivedWhole) {
  absl::StatusOr<std::unique_ptr<FrameListener>> listener =
      FrameListener::Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  const int fd = RawConnect((*listener)->port());
  absl::StatusOr<std::unique_ptr<FrameConnection>> server =
      (*listener)->Accept(kLong);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::vector<Page> pages = ManyPages(200);
  const std::string bytes = EncodeAll(pages);
  std::thread writer([&] {
    size_t done = 0;
    for (size_t i = 0; done < bytes.size(); ++i) {
      const size_t n = std::min(bytes.size() - done, 1 + (i * 7919) % 9000);
      WriteAll(fd, bytes.substr(done, n));
      done += n;
      if (i % 16 == 0) absl::SleepFor(absl::Milliseconds(1));
    }
  });
  for (const Page& want : pages) {
    absl::StatusOr<Frame> got = (*server)->Receive(kLong);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(std::get<Page>(*got).kv_bytes, want.kv_bytes);
  }
  writer.join();
  ::close(fd);
}

// `timeout` is each frame's, not the call's: a slow but steady reader
// takes longer than it for the whole batch and the send succeeds.
TEST(FrameConnectionSendPagesTest, TimeoutIsPerFrameNotPerCall) {
  RawPeer p;
  ConnectToRaw(p);
  ASSERT_TRUE(p.client && p.fd >= 0);
  const std::vector<Page> pages = ManyPages(8000);  // ~33 MB
  const std::string want = EncodeAll(pages);
  const absl::Duration timeout = absl::Milliseconds(600);
  absl::Status status;
  const absl::Time start = absl::Now();
  std::thread sender([&] { status = p.client->SendPages(pages, timeout); });
  // 256 KiB every 20 ms: about 13 MB/s, so the call takes a few times the
  // timeout while every frame goes well within it.
  const std::string got =
      ReadBytes(p.fd, want.size(), 256 << 10, absl::Milliseconds(20));
  sender.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_GT(absl::Now() - start, 2 * timeout);
  EXPECT_TRUE(got == want);
}

// A failure in the middle of a batch, after some of it was written, leaves
// the stream failed: every later send returns it.
TEST(FrameConnectionSendPagesTest, TimeoutMidBatchLeavesTheStreamFailed) {
  RawPeer p;
  ConnectToRaw(p);
  ASSERT_TRUE(p.client && p.fd >= 0);
  const std::vector<Page> pages = ManyPages(6000);  // more than the buffers
  const absl::Status status =
      p.client->SendPages(pages, absl::Milliseconds(200));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("after "), absl::string_view::npos) << status;
  EXPECT_GT(p.client->bytes_sent(), 0u);
  EXPECT_EQ(p.client->Send(Commit{}, kLong).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(p.client->SendPages(ManyPages(1), kLong).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(p.client->SendPages({}, kLong).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(FrameConnectionSendPagesTest, PeerResetMidBatchLeavesTheStreamFailed) {
  RawPeer p;
  ConnectToRaw(p);
  ASSERT_TRUE(p.client && p.fd >= 0);
  const std::vector<Page> pages = ManyPages(6000);
  absl::Status status;
  std::thread sender([&] { status = p.client->SendPages(pages, kLong); });
  (void)ReadBytes(p.fd, 100000, 4096);
  // Closing with unread bytes resets the connection.
  ::close(p.fd);
  p.fd = -1;
  sender.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_EQ(p.client->Send(Commit{}, kLong).code(),
            absl::StatusCode::kUnavailable);
}

TEST(FrameConnectionSendPagesTest, ShutdownFromAnotherThreadUnblocksIt) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  const std::vector<Page> pages = ManyPages(6000);  // nobody reads them
  absl::Status status;
  std::thread sender(
      [&] { status = p.client->SendPages(pages, absl::InfiniteDuration()); });
  absl::SleepFor(absl::Milliseconds(200));
  p.client->Shutdown();
  sender.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
}

TEST(FrameConnectionSendPagesTest, NoPagesWriteNothing) {
  Pair p = Connected();
  ASSERT_TRUE(p.client && p.server);
  EXPECT_TRUE(p.client->SendPages({}, kLong).ok());
  EXPECT_EQ(p.client->bytes_sent(), 0u);
}

}  // namespace
}  // namespace kvcanary::engine::kv
