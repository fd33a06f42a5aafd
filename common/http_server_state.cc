// The HTTP server's shared state (common/http_server_state.h): routing a
// method and path to its handler, and the registry of open connections
// that enforces the connection cap, makes room at it, and drains.
#include "common/http_server_state.h"

#include <sys/socket.h>

#include <chrono>
#include <string>

namespace kvcanary::http::internal {

const Handler* ServerState::Route(const std::string& method,
                                  const std::string& path, int* status) const {
  const std::map<std::string, Handler>* routes = nullptr;
  if (method == "GET" || method == "HEAD") {
    routes = &get_routes;
  } else if (method == "POST") {
    routes = &post_routes;
  }
  if (routes != nullptr) {
    auto it = routes->find(path);
    if (it != routes->end()) return &it->second;
  }
  if (AllowedMethods(path).empty()) {
    if (not_found_handler) return &not_found_handler;
    *status = 404;
  } else {
    *status = 405;
  }
  return nullptr;
}

std::string ServerState::AllowedMethods(const std::string& path) const {
  std::string allowed;
  if (get_routes.count(path) > 0) allowed = "GET, HEAD";
  if (post_routes.count(path) > 0) {
    allowed += allowed.empty() ? "POST" : ", POST";
  }
  return allowed;
}

ServerState::Admission ServerState::Register(const void* connection, int fd,
                                             const std::string& addr) {
  absl::MutexLock lock(&mu_);
  if (draining_.load()) return Admission::kDraining;
  // Evicted connections leave the registry only once their strands close
  // them: they do not count against the cap meanwhile.
  if (static_cast<int>(open_.size()) - evicted_open_ >=
      options.max_connections) {
    bool own_address_over = false;
    Open* victim = Victim(addr, &own_address_over);
    if (victim == nullptr) {
      ++(own_address_over ? stats_.refused_address : stats_.refused_cap);
      return own_address_over ? Admission::kAddressOverCap
                              : Admission::kOverCap;
    }
    ++(victim->pending ? stats_.evicted_pending : stats_.evicted_idle);
    SetUnoccupied(*victim, false);
    victim->evicted = true;
    ++evicted_open_;
    ::shutdown(victim->fd, SHUT_RDWR);  // its strand sees the read fail
  }
  Open& open = open_[connection];
  open.fd = fd;
  open.addr = addr;
  open.since = std::chrono::steady_clock::now();
  open.pending = true;
  SetUnoccupied(open, true);
  return Admission::kAdmitted;
}

ServerState::Open* ServerState::Victim(const std::string& addr,
                                       bool* own_address_over) {
  // An address already holding its share takes nothing from anyone.
  const int share = options.max_unoccupied_per_address;
  auto own = unoccupied_by_addr_.find(addr);
  if (own != unoccupied_by_addr_.end() && own->second >= share) {
    *own_address_over = true;
    return nullptr;
  }
  const std::string* heaviest = nullptr;
  int most = 0;
  for (const auto& [a, n] : unoccupied_by_addr_) {
    if (n > most) {
      most = n;
      heaviest = &a;
    }
  }
  if (heaviest == nullptr || most <= share) return nullptr;
  Open* oldest = nullptr;
  for (auto& [c, open] : open_) {
    if (!open.unoccupied || open.addr != *heaviest) continue;
    if (oldest == nullptr || open.since < oldest->since) oldest = &open;
  }
  return oldest;
}

void ServerState::SetUnoccupied(Open& open, bool unoccupied) {
  if (open.evicted || open.unoccupied == unoccupied) return;
  open.unoccupied = unoccupied;
  if (unoccupied) {
    ++unoccupied_by_addr_[open.addr];
    return;
  }
  auto it = unoccupied_by_addr_.find(open.addr);
  if (--it->second == 0) unoccupied_by_addr_.erase(it);
}

void ServerState::Unregister(const void* connection) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(connection);
  if (it == open_.end()) return;
  SetUnoccupied(it->second, false);
  if (it->second.evicted) --evicted_open_;
  open_.erase(it);
}

bool ServerState::MarkRequested(const void* connection) {
  absl::MutexLock lock(&mu_);
  Open& open = open_.at(connection);
  open.pending = false;
  SetUnoccupied(open, false);
  return !open.evicted;
}

bool ServerState::MarkBusy(const void* connection) {
  absl::MutexLock lock(&mu_);
  if (draining_.load()) return false;
  open_.at(connection).busy = true;
  return true;
}

void ServerState::MarkIdle(const void* connection) {
  absl::MutexLock lock(&mu_);
  open_.at(connection).busy = false;
}

bool ServerState::MarkWaiting(const void* connection, bool waiting) {
  absl::MutexLock lock(&mu_);
  Open& open = open_.at(connection);
  if (waiting) open.since = std::chrono::steady_clock::now();
  SetUnoccupied(open, waiting);
  return !open.evicted;
}

ConnectionStats ServerState::stats() const {
  absl::MutexLock lock(&mu_);
  ConnectionStats s = stats_;
  s.open = static_cast<int>(open_.size());
  for (const auto& [c, open] : open_) {
    s.pending += open.pending && !open.evicted ? 1 : 0;
  }
  return s;
}

void ServerState::Drain() {
  absl::MutexLock lock(&mu_);
  draining_.store(true);
  // Wakes the reads on the strands; the descriptors stay open until their
  // connections close them.
  for (const auto& [connection, open] : open_) {
    if (!open.busy) ::shutdown(open.fd, SHUT_RDWR);
  }
}

void ServerState::ShutdownAll() {
  absl::MutexLock lock(&mu_);
  draining_.store(true);
  stopping_.store(true);
  for (const auto& [connection, open] : open_) ::shutdown(open.fd, SHUT_RDWR);
}

}  // namespace kvcanary::http::internal
