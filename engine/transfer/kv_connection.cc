// Frames over TCP: FrameConnection (whole frames each way with deadlines,
// page frames gathered into batches, plain or through a TlsStream) and
// FrameListener (accepts them).
#include "engine/transfer/kv_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "common/wire.h"
#include "engine/transfer/kv_socket.h"
#include "engine/transfer/kv_tls_stream.h"

namespace kvcanary::engine::kv {
namespace {

// One read into the decoder: a connection buffers at most this and one
// incomplete frame (which a receiver caps at one page of its geometry).
// Larger reads measured no faster on loopback (segments are 64 KiB).
constexpr size_t kReadBytes = 64 << 10;
// A batch of SendPages: frames are gathered until it holds this many bytes
// (small enough that the pages just checksummed are still in cache when
// the kernel copies them) or this many frames.
constexpr size_t kBatchBytes = 256 << 10;
constexpr size_t kBatchFrames = 256;
// Pieces per sendmsg (each frame is two: its K/V, and its CRC with the
// next frame's head); below IOV_MAX.
constexpr size_t kMaxIov = 2 * kBatchFrames + 1;
// A send buffer that grew past this (a large page) is released after use.
constexpr size_t kKeepSendBufferBytes = 1 << 20;
// A TLS session's write buffer and read-ahead (tls::Session::BufferIo): the
// sender's batch of pages goes out in a system call or two, as over plain
// TCP, and the receiver reads as much as a plain read (kReadBytes) at
// once. The accepting end writes only small frames, and holds this little
// for a connection that has not authenticated yet.
constexpr size_t kTlsSenderWriteBytes = 256 << 10;
constexpr size_t kTlsSmallBufferBytes = 17 << 10;  // a whole record

// Fills `iov` (up to kMaxIov entries) with `pieces` from the start; returns
// how many it filled.
size_t FillIov(absl::Span<const absl::string_view> pieces, iovec* iov) {
  size_t count = 0;
  for (; count < pieces.size() && count < kMaxIov; ++count) {
    iov[count].iov_base = const_cast<char*>(pieces[count].data());
    iov[count].iov_len = pieces[count].size();
  }
  return count;
}

// Drops the first `n` bytes of `pieces` (and the pieces they empty).
void Consume(absl::Span<absl::string_view>* pieces, size_t n) {
  while (n > 0) {
    absl::string_view& first = pieces->front();
    const size_t take = std::min(n, first.size());
    first.remove_prefix(take);
    n -= take;
    if (first.empty()) pieces->remove_prefix(1);
  }
}

// Appends `piece` to `pieces`, into the last one when it follows it in
// memory (a frame's CRC and the next frame's head).
void AddPiece(absl::string_view piece, std::vector<absl::string_view>* pieces) {
  if (piece.empty()) return;
  if (!pieces->empty() &&
      pieces->back().data() + pieces->back().size() == piece.data()) {
    pieces->back() = absl::string_view(pieces->back().data(),
                                       pieces->back().size() + piece.size());
    return;
  }
  pieces->push_back(piece);
}

}  // namespace

// ---------------------------------------------------------------------------
// FrameConnection

FrameConnection::FrameConnection(int fd) : fd_(fd) {}

FrameConnection::~FrameConnection() { ::close(fd_); }

std::unique_ptr<FrameConnection> FrameConnection::FromFd(int fd) {
  CHECK_GE(fd, 0);
  const int flags = ::fcntl(fd, F_GETFL, 0);
  CHECK(flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0)
      << "fcntl on fd " << fd << ": " << ErrnoText(errno);
  SetNoDelay(fd);
  return std::unique_ptr<FrameConnection>(new FrameConnection(fd));
}

absl::StatusOr<std::unique_ptr<FrameConnection>> FrameConnection::Connect(
    const std::string& host, int port, absl::Duration timeout,
    const tls::Context* tls) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string what = absl::StrCat("kv connect to ", host, ":", port);
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv connect: bad port ", port));
  }
  ASSIGN_OR_RETURN(const int fd,
                   ConnectTcp(host, port, deadline, what, /*kv_buffers=*/true));
  std::unique_ptr<FrameConnection> conn = FromFd(fd);
  if (tls == nullptr) return conn;
  ASSIGN_OR_RETURN(std::unique_ptr<tls::Session> session,
                   tls::Session::Client(*tls, fd, host));
  RETURN_IF_ERROR(
      session->BufferIo(kTlsSenderWriteBytes, kTlsSmallBufferBytes));
  conn->tls_ = std::make_unique<TlsStream>(std::move(session), fd);
  absl::Status handshake = conn->tls_->Handshake(deadline);
  if (!handshake.ok()) {
    return absl::Status(handshake.code(),
                        absl::StrCat(what, ": ", handshake.message()));
  }
  return conn;
}

std::string FrameConnection::PeerAddress() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) == nullptr)
      return "";
    return text;
  }
  if (addr.ss_family != AF_INET6) return "";
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
  if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
    if (::inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], text, sizeof(text)) ==
        nullptr)
      return "";
    return text;
  }
  if (::inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text)) == nullptr)
    return "";
  return text;
}

absl::Status FrameConnection::AcceptTls(const tls::Context& ctx,
                                        absl::Duration timeout) {
  CHECK(tls_ == nullptr) << "AcceptTls twice";
  ASSIGN_OR_RETURN(std::unique_ptr<tls::Session> session,
                   tls::Session::Server(ctx, fd_));
  RETURN_IF_ERROR(session->BufferIo(kTlsSmallBufferBytes, kReadBytes));
  tls_ = std::make_unique<TlsStream>(std::move(session), fd_);
  return tls_->Handshake(absl::Now() + timeout);
}

absl::Status FrameConnection::Send(const Frame& frame, absl::Duration timeout) {
  send_buffer_.clear();
  EncodeFrame(frame, &send_buffer_);
  const absl::string_view piece = send_buffer_;
  const size_t frame_end = piece.size();
  absl::Status status =
      WritePieces({&piece, 1}, {&frame_end, 1}, timeout,
                  absl::StrCat("a ", FrameTypeName(TypeOf(frame)), " frame"));
  if (send_buffer_.capacity() > kKeepSendBufferBytes) {
    std::string().swap(send_buffer_);
  }
  return status;
}

absl::Status FrameConnection::SendRaw(absl::string_view bytes,
                                      absl::Duration timeout) {
  const size_t end = bytes.size();
  return WritePieces({&bytes, 1}, {&end, 1}, timeout, "raw bytes");
}

absl::Status FrameConnection::SendPages(absl::Span<const Page> pages,
                                        absl::Duration timeout) {
  if (!send_failed_.ok()) return send_failed_;
  bool wrote = false;
  while (!pages.empty()) {
    const size_t count = GatherPages(pages);
    absl::Status status =
        WritePieces(gather_pieces_, gather_frame_ends_, timeout,
                    absl::StrCat("a batch of ", count, " page frames"));
    if (send_buffer_.capacity() > kKeepSendBufferBytes) {
      std::string().swap(send_buffer_);
    }
    if (!status.ok()) {
      // After earlier batches, no retry could tell where to resume.
      if (wrote && send_failed_.ok()) send_failed_ = status;
      return status;
    }
    wrote = true;
    pages.remove_prefix(count);
  }
  return absl::OkStatus();
}

size_t FrameConnection::GatherPages(absl::Span<const Page> pages) {
  gather_pieces_.clear();
  gather_frame_ends_.clear();
  gather_ends_.clear();
  send_buffer_.clear();
  // Never reallocated while the batch is gathered: the pieces point into it.
  gather_ends_.reserve(kBatchFrames * (kPageHeadSize + 4));
  size_t bytes = 0;
  size_t count = 0;
  for (; count < pages.size() && count < kBatchFrames && bytes < kBatchBytes;
       ++count) {
    const Page& page = pages[count];
    if (tls_ != nullptr) {
      // A session encrypts from one buffer: the batch is copied into it.
      EncodeFrame(page, &send_buffer_);
      bytes = send_buffer_.size();
    } else {
      const size_t head = gather_ends_.size();
      const uint32_t crc = EncodePageHead(page, &gather_ends_);
      PutFixed32(&gather_ends_, crc);
      const absl::string_view ends(gather_ends_.data() + head,
                                   kPageHeadSize + 4);
      AddPiece(ends.substr(0, kPageHeadSize), &gather_pieces_);
      AddPiece(page.kv_bytes, &gather_pieces_);
      AddPiece(ends.substr(kPageHeadSize), &gather_pieces_);
      bytes += kPageHeadSize + page.kv_bytes.size() + 4;
    }
    gather_frame_ends_.push_back(bytes);
  }
  if (tls_ != nullptr) gather_pieces_.push_back(send_buffer_);
  return count;
}

absl::Status FrameConnection::WritePieces(
    absl::Span<const absl::string_view> pieces,
    absl::Span<const size_t> frame_ends, absl::Duration timeout,
    absl::string_view what) {
  if (!send_failed_.ok()) return send_failed_;
  CHECK(tls_ == nullptr || pieces.size() <= 1) << "a TLS write is one piece";
  const size_t total = frame_ends.empty() ? 0 : frame_ends.back();
  // What is left to write: a copy of the views, consumed as bytes go out.
  std::vector<absl::string_view> left(pieces.begin(), pieces.end());
  absl::Span<absl::string_view> rest(left);
  absl::Time deadline = absl::Now() + timeout;
  size_t sent = 0;
  size_t frames_done = 0;
  absl::Status status;
  while (sent < total) {
    absl::StatusOr<size_t> n = WriteSome(rest, deadline);
    if (!n.ok()) {
      status = n.status();
      break;
    }
    sent += *n;
    bytes_sent_.fetch_add(*n);
    Consume(&rest, *n);
    if (frames_done < frame_ends.size() && frame_ends[frames_done] <= sent) {
      while (frames_done < frame_ends.size() &&
             frame_ends[frames_done] <= sent) {
        ++frames_done;
      }
      deadline = absl::Now() + timeout;  // the next frame's own
    }
  }
  // Over TLS the last records may still sit in the session's buffer.
  if (status.ok() && tls_ != nullptr)
    status = tls_->Flush(deadline, shut_down_);
  if (status.ok()) return status;
  // Only a timeout before the first byte leaves the stream usable (never
  // over TLS: a session must retry a write it started with the same bytes).
  if (absl::IsDeadlineExceeded(status) && sent == 0 && tls_ == nullptr) {
    return status;
  }
  send_failed_ = absl::Status(
      status.code(), absl::StrCat(status.message(), " (after ", sent, " of ",
                                  total, " bytes of ", what, ")"));
  return send_failed_;
}

absl::StatusOr<size_t> FrameConnection::WriteSome(
    absl::Span<const absl::string_view> pieces, absl::Time deadline) {
  const auto cancelled = [] {
    return absl::CancelledError("kv send: connection shut down");
  };
  while (true) {
    if (shut_down_.load()) return cancelled();
    if (tls_ != nullptr) {
      absl::StatusOr<size_t> n = tls_->Write(pieces.front(), deadline);
      if (!n.ok() && shut_down_.load()) return cancelled();
      return n;
    }
    iovec iov[kMaxIov];
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = FillIov(pieces, iov);
    const ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n > 0) return static_cast<size_t>(n);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, "kv send"));
      continue;
    }
    if (shut_down_.load()) return cancelled();
    return SocketError(errno, "kv send");
  }
}

absl::Status FrameConnection::ReceiveFailed(absl::Status status) {
  receive_failed_ = std::move(status);
  return receive_failed_;
}

absl::StatusOr<size_t> FrameConnection::ReadSome(absl::Time deadline) {
  char* room = decoder_.PrepareFeed(kReadBytes);
  while (true) {
    size_t got = 0;
    if (tls_ != nullptr) {
      ASSIGN_OR_RETURN(got, tls_->Read(room, kReadBytes, deadline));
    } else {
      const ssize_t n = ::recv(fd_, room, kReadBytes, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, "kv receive"));
        continue;
      }
      if (n < 0) return SocketError(errno, "kv receive");
      got = static_cast<size_t>(n);
    }
    decoder_.CommitFeed(got);
    bytes_received_.fetch_add(got);
    return got;
  }
}

absl::StatusOr<Frame> FrameConnection::Receive(absl::Duration timeout) {
  if (!receive_failed_.ok()) return receive_failed_;
  // Set before the first read: a frame already buffered needs no clock.
  std::optional<absl::Time> deadline;
  while (true) {
    if (shut_down_.load()) {
      return ReceiveFailed(
          absl::CancelledError("kv receive: connection shut down"));
    }
    absl::StatusOr<std::optional<Frame>> next = decoder_.Next();
    if (!next.ok()) return ReceiveFailed(next.status());
    if (next->has_value()) return std::move(**next);

    if (!deadline.has_value()) deadline = absl::Now() + timeout;
    absl::StatusOr<size_t> n = ReadSome(*deadline);
    if (absl::IsDeadlineExceeded(n.status())) return n.status();  // retryable
    if (shut_down_.load()) continue;  // reported at the top of the loop
    if (!n.ok()) return ReceiveFailed(n.status());
    if (*n > 0) continue;
    // 0: the peer closed its end.
    if (decoder_.buffered_bytes() == 0) {
      return ReceiveFailed(
          absl::UnavailableError("kv receive: peer closed the connection"));
    }
    return ReceiveFailed(absl::DataLossError(absl::StrCat(
        "kv receive: stream ended mid-frame (", decoder_.buffered_bytes(),
        " bytes of an incomplete frame)")));
  }
}

absl::Status FrameConnection::AwaitFrame(absl::Duration timeout) {
  if (!receive_failed_.ok()) return receive_failed_;
  const absl::Time deadline = absl::Now() + timeout;
  while (decoder_.buffered_bytes() == 0) {
    if (shut_down_.load()) {
      return ReceiveFailed(
          absl::CancelledError("kv receive: connection shut down"));
    }
    absl::StatusOr<size_t> n = ReadSome(deadline);
    if (absl::IsDeadlineExceeded(n.status())) return n.status();  // retryable
    if (shut_down_.load()) continue;  // reported at the top of the loop
    if (!n.ok()) return ReceiveFailed(n.status());
    if (*n == 0) {
      return ReceiveFailed(
          absl::UnavailableError("kv receive: peer closed the connection"));
    }
  }
  return absl::OkStatus();
}

bool FrameConnection::Reusable() {
  if (shut_down_.load() || !send_failed_.ok() || !receive_failed_.ok() ||
      decoder_.buffered_bytes() != 0) {
    return false;
  }
  if (tls_ != nullptr && tls_->HasBuffered()) return false;
  pollfd p{fd_, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&p, 1, 0);
  } while (ready < 0 && errno == EINTR);
  return ready == 0;
}

void FrameConnection::Shutdown() {
  if (!shut_down_.exchange(true)) ::shutdown(fd_, SHUT_RDWR);
}

// ---------------------------------------------------------------------------
// FrameListener

absl::StatusOr<std::unique_ptr<FrameListener>> FrameListener::Listen(
    const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv listen: bad port ", port));
  }
  const std::string what = absl::StrCat("kv listen on ", host, ":", port);
  absl::StatusOr<AddrInfoPtr> addrs = Resolve(host, port, /*passive=*/true);
  if (!addrs.ok()) return addrs.status();
  absl::Status last = absl::UnavailableError(what + ": no address");
  for (const addrinfo* ai = addrs->get(); ai != nullptr; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                 ai->ai_protocol);
    if (fd < 0) {
      last = SocketError(errno, what + ": socket");
      continue;
    }
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    SetBufferSizes(fd);  // accepted connections inherit them
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        ::listen(fd, SOMAXCONN) != 0) {
      last = SocketError(errno, what);
      ::close(fd);
      continue;
    }
    return Adopt(fd);
  }
  return last;
}

absl::StatusOr<std::unique_ptr<FrameListener>> FrameListener::FromFd(int fd) {
  int listening = 0;
  socklen_t optlen = sizeof(listening);
  if (fd < 0 ||
      ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 ||
      listening == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv listen: fd ", fd, " is not a listening socket"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    return SocketError(errno, absl::StrCat("kv listen: fd ", fd));
  }
  return Adopt(fd);
}

// Takes ownership of listening socket `fd` (closed on error).
absl::StatusOr<std::unique_ptr<FrameListener>> FrameListener::Adopt(int fd) {
  sockaddr_storage bound;
  socklen_t len = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return SocketError(err, "kv listen: getsockname");
  }
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    const int err = errno;
    ::close(fd);
    return SocketError(err, "kv listen: eventfd");
  }
  const int port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<FrameListener>(new FrameListener(fd, port, wake));
}

FrameListener::~FrameListener() {
  ::close(fd_);
  ::close(wake_fd_);
}

absl::StatusOr<std::unique_ptr<FrameConnection>> FrameListener::Accept(
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (closed_.load())
      return absl::CancelledError("kv accept: listener closed");
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int rc = ReadyBeforeSleep(p, 2, deadline)
                       ? 1
                       : ::poll(p, 2, PollTimeoutMs(deadline));
    if (rc < 0 && errno != EINTR) {
      return SocketError(errno, "kv accept: poll");
    }
    if (rc == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError("kv accept: timed out");
    }
    if (closed_.load())
      return absl::CancelledError("kv accept: listener closed");
    const int fd =
        ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) return FrameConnection::FromFd(fd);
    switch (errno) {
      case EINTR:
      case EAGAIN:
#if EWOULDBLOCK != EAGAIN
      case EWOULDBLOCK:
#endif
      case ECONNABORTED:  // the peer gave up while queued
      case EPROTO:
        continue;
      default:
        return SocketError(errno, "kv accept");
    }
  }
}

void FrameListener::Close() {
  // The fds stay open until the destructor, so neither can be reused
  // under a poll in Accept.
  if (!closed_.exchange(true)) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
}

}  // namespace kvcanary::engine::kv
