#include "engine/transfer/kv_connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvcanary::engine::kv {
namespace {

constexpr size_t kRecvChunkBytes = 64 << 10;
// A send buffer that grew past this (a large page) is released after use.
constexpr size_t kKeepSendBufferBytes = 1 << 20;

// strerror_r is the GNU or the XSI variant depending on feature macros.
[[maybe_unused]] std::string StrErrorResult(int rc, const char* buf) {
  return rc == 0 ? std::string(buf) : "unknown error";
}
[[maybe_unused]] std::string StrErrorResult(const char* s, const char*) {
  return std::string(s);
}
std::string ErrnoText(int err) {
  char buf[128] = {0};
  return StrErrorResult(strerror_r(err, buf, sizeof(buf)), buf);
}

// The one place an errno becomes a Status.
absl::Status SocketErrorToStatus(int err, absl::string_view what) {
  std::string message = absl::StrCat(what, ": ", ErrnoText(err));
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ETIMEDOUT:
    case EADDRINUSE:
    case EADDRNOTAVAIL:
      return absl::UnavailableError(message);
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

// Milliseconds for poll() until `deadline`: -1 for none, 0 once past.
int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const int64_t ms =
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

// OK once `fd` has one of `events` (or an error/hangup to report), else
// kDeadlineExceeded at `deadline`.
absl::Status WaitFor(int fd, short events, absl::Time deadline,
                     absl::string_view what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, PollTimeoutMs(deadline));
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) {
      if (deadline != absl::InfiniteFuture() && absl::Now() < deadline) {
        continue;  // poll rounds; wait out the rest
      }
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
    if (errno != EINTR)
      return SocketErrorToStatus(errno, absl::StrCat(what, ": poll"));
  }
}

void SetNoDelay(int fd) {
  int one = 1;
  // Fails harmlessly on non-TCP sockets (socketpairs in tests).
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

using AddrInfoPtr = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;

absl::StatusOr<AddrInfoPtr> Resolve(const std::string& host, int port,
                                    bool passive) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  const std::string service = std::to_string(port);
  addrinfo* result = nullptr;
  const char* node = host.empty() ? nullptr : host.c_str();
  const int rc = ::getaddrinfo(node, service.c_str(), &hints, &result);
  if (rc != 0) {
    std::string message =
        absl::StrCat("resolve ", host, ":", port, ": ", ::gai_strerror(rc));
    if (rc == EAI_SYSTEM) return SocketErrorToStatus(errno, message);
    if (rc == EAI_AGAIN) return absl::UnavailableError(message);
    return absl::InvalidArgumentError(message);
  }
  return AddrInfoPtr(result, ::freeaddrinfo);
}

// Connects one address; the returned fd is non-blocking.
absl::StatusOr<int> ConnectOne(const addrinfo& ai, absl::Time deadline,
                               absl::string_view what) {
  const int fd =
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai.ai_protocol);
  if (fd < 0) return SocketErrorToStatus(errno, absl::StrCat(what, ": socket"));
  absl::Status status;
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      status = SocketErrorToStatus(errno, what);
    } else {
      status = WaitFor(fd, POLLOUT, deadline, what);
      int err = 0;
      socklen_t len = sizeof(err);
      if (status.ok() &&
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
        err = errno;
      }
      if (status.ok() && err != 0) status = SocketErrorToStatus(err, what);
    }
  }
  if (!status.ok()) {
    ::close(fd);
    return status;
  }
  return fd;
}

}  // namespace

// ---------------------------------------------------------------------------
// FrameConnection

FrameConnection::FrameConnection(int fd)
    : fd_(fd), recv_chunk_(kRecvChunkBytes) {}

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
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv connect: bad port ", port));
  }
  const absl::Time deadline = absl::Now() + timeout;
  const std::string what = absl::StrCat("kv connect to ", host, ":", port);
  absl::StatusOr<AddrInfoPtr> addrs = Resolve(host, port, /*passive=*/false);
  if (!addrs.ok()) return addrs.status();
  absl::Status last = absl::UnavailableError(what + ": no address");
  for (const addrinfo* ai = addrs->get(); ai != nullptr; ai = ai->ai_next) {
    absl::StatusOr<int> fd = ConnectOne(*ai, deadline, what);
    if (fd.ok()) {
      std::unique_ptr<FrameConnection> conn = FromFd(*fd);
      if (tls == nullptr) return conn;
      ASSIGN_OR_RETURN(conn->tls_, tls::Session::Client(*tls, *fd, host));
      absl::MutexLock lock(&conn->tls_mu_);
      absl::Status handshake = tls::HandshakeUntil(*conn->tls_, *fd, deadline);
      if (!handshake.ok()) {
        return absl::Status(handshake.code(),
                            absl::StrCat(what, ": ", handshake.message()));
      }
      return conn;
    }
    last = fd.status();
    if (absl::IsDeadlineExceeded(last)) break;
  }
  return last;
}

absl::Status FrameConnection::AcceptTls(const tls::Context& ctx,
                                        absl::Duration timeout) {
  CHECK(tls_ == nullptr) << "AcceptTls twice";
  ASSIGN_OR_RETURN(tls_, tls::Session::Server(ctx, fd_));
  absl::MutexLock lock(&tls_mu_);
  return tls::HandshakeUntil(*tls_, fd_, absl::Now() + timeout);
}

absl::StatusOr<size_t> FrameConnection::TlsWrite(absl::string_view bytes,
                                                 absl::Time deadline) {
  while (true) {
    size_t n = 0;
    tls::Io io;
    std::string error;
    {
      absl::MutexLock lock(&tls_mu_);
      io = tls_->Write(bytes.data(), bytes.size(), &n);
      if (io == tls::Io::kFailed) error = tls_->error();
    }
    switch (io) {
      case tls::Io::kOk:
        return n;
      case tls::Io::kWantRead:
        RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, "kv send"));
        continue;
      case tls::Io::kWantWrite:
        RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, "kv send"));
        continue;
      case tls::Io::kClosed:
        return absl::UnavailableError("kv send: the peer closed the session");
      case tls::Io::kFailed:
        return absl::UnavailableError(absl::StrCat("kv send: TLS: ", error));
    }
  }
}

absl::StatusOr<size_t> FrameConnection::TlsRead(absl::Time deadline) {
  while (true) {
    size_t n = 0;
    tls::Io io;
    std::string error;
    {
      absl::MutexLock lock(&tls_mu_);
      io = tls_->Read(recv_chunk_.data(), recv_chunk_.size(), &n);
      if (io == tls::Io::kFailed) error = tls_->error();
    }
    switch (io) {
      case tls::Io::kOk:
        return n;
      case tls::Io::kClosed:
        return 0;
      case tls::Io::kWantRead:
        RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, "kv receive"));
        continue;
      case tls::Io::kWantWrite:
        RETURN_IF_ERROR(WaitFor(fd_, POLLOUT, deadline, "kv receive"));
        continue;
      case tls::Io::kFailed:
        return absl::DataLossError(absl::StrCat("kv receive: TLS: ", error));
    }
  }
}

absl::Status FrameConnection::Send(const Frame& frame, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  send_buffer_.clear();
  EncodeFrame(frame, &send_buffer_);
  absl::Status status =
      WriteAll(send_buffer_, deadline,
               absl::StrCat("a ", FrameTypeName(TypeOf(frame)), " frame"));
  if (send_buffer_.capacity() > kKeepSendBufferBytes) {
    std::string().swap(send_buffer_);
  }
  return status;
}

absl::Status FrameConnection::SendRaw(absl::string_view bytes,
                                      absl::Duration timeout) {
  return WriteAll(bytes, absl::Now() + timeout, "raw bytes");
}

absl::Status FrameConnection::WriteAll(absl::string_view bytes,
                                       absl::Time deadline,
                                       absl::string_view what) {
  if (!send_failed_.ok()) return send_failed_;
  size_t sent = 0;
  absl::Status status;
  while (sent < bytes.size()) {
    if (shut_down_.load()) {
      status = absl::CancelledError("kv send: connection shut down");
      break;
    }
    if (tls_ != nullptr) {
      absl::StatusOr<size_t> n = TlsWrite(bytes.substr(sent), deadline);
      if (!n.ok()) {
        status = shut_down_.load()
                     ? absl::CancelledError("kv send: connection shut down")
                     : n.status();
        break;
      }
      sent += *n;
      bytes_sent_.fetch_add(*n);
      continue;
    }
    const ssize_t n =
        ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      bytes_sent_.fetch_add(static_cast<uint64_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      status = WaitFor(fd_, POLLOUT, deadline, "kv send");
      if (!status.ok()) break;
      continue;
    }
    status = shut_down_.load()
                 ? absl::CancelledError("kv send: connection shut down")
                 : SocketErrorToStatus(errno, "kv send");
    break;
  }
  if (status.ok()) return status;
  // Only a timeout before the first byte leaves the stream usable (never
  // over TLS: a session must retry a write it started with the same bytes).
  if (absl::IsDeadlineExceeded(status) && sent == 0 && tls_ == nullptr) {
    return status;
  }
  send_failed_ = absl::Status(
      status.code(), absl::StrCat(status.message(), " (after ", sent, " of ",
                                  bytes.size(), " bytes of ", what, ")"));
  return send_failed_;
}

absl::Status FrameConnection::ReceiveFailed(absl::Status status) {
  receive_failed_ = std::move(status);
  return receive_failed_;
}

absl::StatusOr<Frame> FrameConnection::Receive(absl::Duration timeout) {
  if (!receive_failed_.ok()) return receive_failed_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (shut_down_.load()) {
      return ReceiveFailed(
          absl::CancelledError("kv receive: connection shut down"));
    }
    absl::StatusOr<std::optional<Frame>> next = decoder_.Next();
    if (!next.ok()) return ReceiveFailed(next.status());
    if (next->has_value()) return std::move(**next);

    ssize_t n;
    if (tls_ != nullptr) {
      absl::StatusOr<size_t> got = TlsRead(deadline);
      if (absl::IsDeadlineExceeded(got.status())) return got.status();
      if (!got.ok() && shut_down_.load()) continue;  // reported at the top
      if (!got.ok()) return ReceiveFailed(got.status());
      n = static_cast<ssize_t>(*got);
    } else {
      absl::Status ready = WaitFor(fd_, POLLIN, deadline, "kv receive");
      if (absl::IsDeadlineExceeded(ready)) return ready;  // retryable
      if (!ready.ok()) return ReceiveFailed(std::move(ready));
      n = ::recv(fd_, recv_chunk_.data(), recv_chunk_.size(), 0);
    }
    if (n > 0) {
      bytes_received_.fetch_add(static_cast<uint64_t>(n));
      decoder_.Feed(absl::string_view(recv_chunk_.data(), n));
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
      continue;
    }
    if (shut_down_.load()) continue;  // reported at the top of the loop
    if (n < 0) return ReceiveFailed(SocketErrorToStatus(errno, "kv receive"));
    // n == 0: the peer closed its end.
    if (decoder_.buffered_bytes() == 0) {
      return ReceiveFailed(
          absl::UnavailableError("kv receive: peer closed the connection"));
    }
    return ReceiveFailed(absl::DataLossError(absl::StrCat(
        "kv receive: stream ended mid-frame (", decoder_.buffered_bytes(),
        " bytes of an incomplete frame)")));
  }
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
      last = SocketErrorToStatus(errno, what + ": socket");
      continue;
    }
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        ::listen(fd, SOMAXCONN) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      last = SocketErrorToStatus(errno, what);
      ::close(fd);
      continue;
    }
    const int bound_port =
        bound.ss_family == AF_INET6
            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return std::unique_ptr<FrameListener>(new FrameListener(fd, bound_port));
  }
  return last;
}

FrameListener::~FrameListener() { ::close(fd_); }

absl::StatusOr<std::unique_ptr<FrameConnection>> FrameListener::Accept(
    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (closed_.load())
      return absl::CancelledError("kv accept: listener closed");
    RETURN_IF_ERROR(WaitFor(fd_, POLLIN, deadline, "kv accept"));
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
        return SocketErrorToStatus(errno, "kv accept");
    }
  }
}

void FrameListener::Close() {
  // shutdown() on a listening socket wakes a poll() blocked on it in
  // Accept; the fd itself stays open until the destructor, so it cannot be
  // reused under that poll.
  if (!closed_.exchange(true)) ::shutdown(fd_, SHUT_RDWR);
}

}  // namespace kvcanary::engine::kv
