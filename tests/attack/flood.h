// An attacker on the same network, for the attack tests: `count` TCP
// connections from one address (another loopback address than the
// victim's clients, e.g. 127.0.0.2, so a per-address rule can tell them
// apart) to a port, held open sending nothing, and each reopened as soon as
// the server closes it, until the flood is stopped. Raise the open-files
// limit first (RaiseOpenFilesLimit) where `count` needs it.
#ifndef KVCANARY_TESTS_ATTACK_FLOOD_H_
#define KVCANARY_TESTS_ATTACK_FLOOD_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kvcanary::testing {

// Raises this process's soft RLIMIT_NOFILE to at least `want` (up to the
// hard limit); children started afterwards inherit it. The soft limit
// reached.
inline rlim_t RaiseOpenFilesLimit(rlim_t want) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < want) {
    limit.rlim_cur = std::min(want, limit.rlim_max);
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

class SocketFlood {
 public:
  // `reopen_after`: how long after the server closes a connection it is
  // opened again (0: at once).
  SocketFlood(std::string from, int port, int count,
              std::chrono::milliseconds reopen_after = {})
      : from_(std::move(from)),
        port_(port),
        count_(count),
        reopen_after_(reopen_after) {}
  ~SocketFlood() { Stop(); }
  SocketFlood(const SocketFlood&) = delete;
  SocketFlood& operator=(const SocketFlood&) = delete;

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Connections opened so far (reopens included), those the server closed,
  // and those held now.
  uint64_t opened() const { return opened_.load(); }
  uint64_t closed_by_server() const { return closed_.load(); }
  int held() const { return held_.load(); }

 private:
  // A non-blocking connection from from_ to 127.0.0.1:port_; -1 if the
  // socket could not be made (out of descriptors).
  int Dial() const {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, from_.c_str(), &local.sin_addr);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      close(fd);
      return -1;
    }
    connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    return fd;
  }

  void Run() {
    using Clock = std::chrono::steady_clock;
    std::vector<pollfd> fds(count_, pollfd{-1, POLLIN, 0});
    std::vector<Clock::time_point> reopen_at(count_, Clock::time_point());
    char sink[4096];
    while (!stop_.load()) {
      int held = 0;
      const Clock::time_point now = Clock::now();
      for (int i = 0; i < count_; ++i) {
        pollfd& p = fds[i];
        if (p.fd < 0 && now >= reopen_at[i]) {
          p.fd = Dial();
          if (p.fd >= 0) opened_.fetch_add(1);
        }
        held += p.fd >= 0 ? 1 : 0;
      }
      held_.store(held);
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      for (int i = 0; i < count_; ++i) {
        pollfd& p = fds[i];
        if (p.fd < 0 || p.revents == 0) continue;
        // What the server says (a 503, an Abort) is read and dropped; its
        // close ends this connection here too, reopened reopen_after_ on.
        const ssize_t n = recv(p.fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN) ||
            (p.revents & (POLLHUP | POLLERR)) != 0) {
          close(p.fd);
          p.fd = -1;
          reopen_at[i] = Clock::now() + reopen_after_;
          closed_.fetch_add(1);
        }
        p.revents = 0;
      }
    }
    for (pollfd& p : fds) {
      if (p.fd >= 0) close(p.fd);
    }
  }

  const std::string from_;
  const int port_;
  const int count_;
  const std::chrono::milliseconds reopen_after_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> closed_{0};
  std::atomic<int> held_{0};
  std::thread thread_;
};

}  // namespace kvcanary::testing

#endif  // KVCANARY_TESTS_ATTACK_FLOOD_H_
