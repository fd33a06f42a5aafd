#include "engine/nodes/node_pool.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "engine/nodes/node_common.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_socket.h"

namespace kvcanary::engine {
namespace {

// One read: a stream of NDJSON lines arrives a few hundred bytes at a time.
constexpr size_t kReadBytes = 16 << 10;

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const int64_t ms =
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
  return ms > 60000 ? 60000 : static_cast<int>(ms);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NodeConnection>> NodeConnection::Open(
    const std::string& url, const tls::Context* tls, absl::Time deadline) {
  ASSIGN_OR_RETURN(const NodeUrl parsed, ParseNodeUrl(url, tls));
  const std::string what = absl::StrCat("node ", url);
  ASSIGN_OR_RETURN(const int fd,
                   kv::ConnectTcp(parsed.host, parsed.port, deadline, what,
                                  /*kv_buffers=*/false));
  std::unique_ptr<NodeConnection> c(new NodeConnection(fd));
  if (tls != nullptr) {
    ASSIGN_OR_RETURN(c->tls_, tls::Session::Client(*tls, fd, parsed.host));
    const absl::Status handshake = tls::HandshakeUntil(*c->tls_, fd, deadline);
    if (!handshake.ok()) {
      return absl::Status(handshake.code(),
                          absl::StrCat(what, ": ", handshake.message()));
    }
  }
  return c;
}

NodeConnection::~NodeConnection() {
  // Shut down first: the node sees the router go even if another process
  // holds a copy of the descriptor.
  ::shutdown(fd_, SHUT_RDWR);
  ::close(fd_);
}

void NodeConnection::Shutdown() { ::shutdown(fd_, SHUT_RDWR); }

absl::Status NodeConnection::Wait(short events, absl::Time deadline,
                                  int wake_fd, absl::string_view what) {
  while (true) {
    pollfd fds[2] = {{fd_, events, 0}, {wake_fd, POLLIN, 0}};
    const int rc = ::poll(fds, wake_fd >= 0 ? 2 : 1, PollMs(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      return kv::SocketError(errno, absl::StrCat(what, ": poll"));
    }
    if (wake_fd >= 0 && fds[1].revents != 0) {
      return absl::CancelledError(absl::StrCat(what, ": given up"));
    }
    if (fds[0].revents != 0) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    }
  }
}

absl::Status NodeConnection::Write(absl::string_view bytes, absl::Time deadline,
                                   int wake_fd) {
  while (!bytes.empty()) {
    size_t n = 0;
    short want = POLLOUT;
    if (tls_ == nullptr) {
      const ssize_t w = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (w > 0) n = static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return kv::SocketError(errno, "send to node");
      }
    } else {
      switch (tls_->Write(bytes.data(), bytes.size(), &n)) {
        case tls::Io::kOk:
          break;
        case tls::Io::kWantRead:
          want = POLLIN;
          break;
        case tls::Io::kWantWrite:
          break;
        case tls::Io::kClosed:
          return absl::UnavailableError("send to node: the node closed TLS");
        case tls::Io::kFailed:
          return absl::UnavailableError(
              absl::StrCat("send to node: TLS: ", tls_->error()));
      }
    }
    bytes.remove_prefix(n);
    if (n == 0) RETURN_IF_ERROR(Wait(want, deadline, wake_fd, "send to node"));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> NodeConnection::Read(absl::Time deadline, int wake_fd) {
  char chunk[kReadBytes];
  while (true) {
    short want = POLLIN;
    if (tls_ == nullptr) {
      const ssize_t r = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (r >= 0) {
        buffer_.append(chunk, static_cast<size_t>(r));
        return static_cast<size_t>(r);
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return kv::SocketError(errno, "read from node");
      }
    } else {
      size_t n = 0;
      switch (tls_->Read(chunk, sizeof(chunk), &n)) {
        case tls::Io::kOk:
          buffer_.append(chunk, n);
          return n;
        case tls::Io::kClosed:
          return 0;
        case tls::Io::kWantRead:
          break;
        case tls::Io::kWantWrite:
          want = POLLOUT;
          break;
        case tls::Io::kFailed:
          return absl::UnavailableError(
              absl::StrCat("read from node: TLS: ", tls_->error()));
      }
    }
    RETURN_IF_ERROR(Wait(want, deadline, wake_fd, "read from node"));
  }
}

bool NodeConnection::Quiet() const {
  if (!buffer_.empty()) return false;
  if (tls_ != nullptr && tls_->HasBuffered()) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

bool NodeConnection::ClosedByPeer() const {
  char c;
  const ssize_t r = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0) return true;
  return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

absl::StatusOr<NodePool::Lease> NodePool::Acquire(const std::string& url,
                                                  absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto it = idle_.find(url);
    while (it != idle_.end() && !it->second.empty()) {
      std::unique_ptr<NodeConnection> c = std::move(it->second.back());
      it->second.pop_back();
      if (absl::Now() - c->idle_since > options_.max_idle_time) continue;
      // A healthy pool hands out only a connection nothing arrived on since
      // its last answer; with the fault, anything the node has not closed.
      const bool usable =
          options_.reuse_cancelled ? !c->ClosedByPeer() : c->Quiet();
      if (!usable) continue;
      reused_.fetch_add(1);
      return Lease{std::move(c), /*reused=*/true};
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<NodeConnection> c,
                   NodeConnection::Open(url, options_.tls, deadline));
  opened_.fetch_add(1);
  return Lease{std::move(c), /*reused=*/false};
}

void NodePool::Release(const std::string& url,
                       std::unique_ptr<NodeConnection> connection) {
  CHECK(connection != nullptr);
  if (options_.max_idle_per_node <= 0) return;
  // Bytes after the answer: the connection is out of step with its node
  // (a healthy pool never keeps one).
  if (!options_.reuse_cancelled && !connection->buffer().empty()) return;
  connection->idle_since = absl::Now();
  absl::MutexLock lock(&mu_);
  auto& idle = idle_[url];
  idle.push_back(std::move(connection));
  // The least recently used go first.
  while (static_cast<int>(idle.size()) > options_.max_idle_per_node) {
    idle.pop_front();
  }
}

void NodePool::ReleaseCancelled(const std::string& url,
                                std::unique_ptr<NodeConnection> connection) {
  if (options_.reuse_cancelled) Release(url, std::move(connection));
}

}  // namespace kvcanary::engine
