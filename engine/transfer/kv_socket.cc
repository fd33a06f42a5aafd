// The KV plane's TCP sockets: errno to Status, waits with deadlines that
// poll before they sleep, resolving and connecting.
#include "engine/transfer/kv_socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvcanary::engine::kv {

bool ReadyBeforeSleep(pollfd* fds, nfds_t count, absl::Time deadline) {
  const absl::Time poll_until =
      std::min(deadline, absl::Now() + kPollBeforeSleep);
  while (absl::Now() < poll_until) {
    if (::poll(fds, count, 0) > 0) return true;
    sched_yield();
  }
  return false;
}

namespace {

// SO_SNDBUF and SO_RCVBUF of every KV socket: room for several batches in
// flight, and a bound on the kernel memory a connection holds (the kernel
// doubles it; net.core.wmem_max/rmem_max may lower it).
constexpr int kSocketBufferBytes = 2 << 20;

// strerror_r is the GNU or the XSI variant depending on feature macros.
[[maybe_unused]] std::string StrErrorResult(int rc, const char* buf) {
  return rc == 0 ? std::string(buf) : "unknown error";
}
[[maybe_unused]] std::string StrErrorResult(const char* s, const char*) {
  return std::string(s);
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

// Connects one address; the returned fd is non-blocking.
absl::StatusOr<int> ConnectOne(const addrinfo& ai, absl::Time deadline,
                               absl::string_view what, bool kv_buffers) {
  const int fd =
      ::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai.ai_protocol);
  if (fd < 0) return SocketErrorToStatus(errno, absl::StrCat(what, ": socket"));
  // Before connect: the window scale is chosen then.
  if (kv_buffers) SetBufferSizes(fd);
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

std::string ErrnoText(int err) {
  char buf[128] = {0};
  return StrErrorResult(strerror_r(err, buf, sizeof(buf)), buf);
}

absl::Status SocketError(int err, absl::string_view what) {
  return SocketErrorToStatus(err, what);
}

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const int64_t ms =
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

absl::Status WaitFor(int fd, short events, absl::Time deadline,
                     absl::string_view what) {
  pollfd first{fd, events, 0};
  if (ReadyBeforeSleep(&first, 1, deadline)) return absl::OkStatus();
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

void SetBufferSizes(int fd) {
  // Best effort: the kernel caps them, and a socket works without.
  const int size = kSocketBufferBytes;
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

void SetNoDelay(int fd) {
  int one = 1;
  // Fails harmlessly on non-TCP sockets (socketpairs in tests).
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

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

absl::StatusOr<int> ConnectTcp(const std::string& host, int port,
                               absl::Time deadline, absl::string_view what,
                               bool kv_buffers) {
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": bad port ", port));
  }
  absl::StatusOr<AddrInfoPtr> addrs = Resolve(host, port, /*passive=*/false);
  if (!addrs.ok()) return addrs.status();
  absl::Status last =
      absl::UnavailableError(absl::StrCat(what, ": no address"));
  for (const addrinfo* ai = addrs->get(); ai != nullptr; ai = ai->ai_next) {
    absl::StatusOr<int> fd = ConnectOne(*ai, deadline, what, kv_buffers);
    if (fd.ok()) {
      SetNoDelay(*fd);
      return fd;
    }
    last = fd.status();
    if (absl::IsDeadlineExceeded(last)) break;
  }
  return last;
}

}  // namespace kvcanary::engine::kv
