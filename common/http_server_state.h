// What every connection of the HTTP server shares (common/http_server.h):
// its settings, its routes, the handler pool, and the registry of open
// connections that enforces the connection cap (making room by closing the
// oldest unoccupied connection of the address most over its share) and
// drains them on Stop(). Internal to the server.
#ifndef KVCANARY_COMMON_HTTP_SERVER_STATE_H_
#define KVCANARY_COMMON_HTTP_SERVER_STATE_H_

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/http_handler_pool.h"
#include "common/http_message.h"
#include "common/http_options.h"

namespace kvcanary::http::internal {

// What every connection of a server shares: its settings, routes and the
// registry of open connections (the connection cap, and Stop()).
class ServerState {
 public:
  explicit ServerState(Options options)
      : options(options), pool(options.handler_threads) {}

  const Options options;
  // Set before serving, read-only after.
  std::map<std::string, Handler> get_routes;
  std::map<std::string, Handler> post_routes;
  Handler error_handler;
  Handler not_found_handler;                      // null: 404
  ExpectContinueHandler expect_continue_handler;  // null: always 100
  Headers default_headers;
  HandlerPool pool;

  // The handler for method + path; null and *status 404 or 405 otherwise.
  const Handler* Route(const std::string& method, const std::string& path,
                       int* status) const;
  // The methods `path` is served with, for a 405's Allow field.
  std::string AllowedMethods(const std::string& path) const;

  // A new connection from `addr`. At the cap one is made room for (see
  // http::Options::max_connections), unless `addr` holds its share of
  // unoccupied connections (no complete request yet, or waiting for the
  // next) already (kAddressOverCap): the oldest unoccupied connection of
  // the address over its share by most is shut down; else kOverCap.
  enum class Admission { kAdmitted, kOverCap, kAddressOverCap, kDraining };
  Admission Register(const void* connection, int fd, const std::string& addr);
  void Unregister(const void* connection);
  // The connection's first request is complete (read whole, or answered
  // by the layer): from now on it no longer counts as pending. False if
  // the connection was closed to make room (it must not be served).
  bool MarkRequested(const void* connection);
  // A connection's handler is about to run (false: draining, do not run
  // it), or has finished writing.
  bool MarkBusy(const void* connection);
  void MarkIdle(const void* connection);
  // The connection waits for its next request's first byte (keep-alive),
  // or that wait ended. False if it was closed to make room meanwhile:
  // what the client sent since must not be read (it was not served, so the
  // client may send it again on another connection).
  bool MarkWaiting(const void* connection, bool waiting);
  ConnectionStats stats() const;
  // From now on no connection or request is admitted; shuts down every
  // connection not running a handler (the others close after their
  // response).
  void Drain();
  // Drain(), and shuts down the busy connections too: their handlers'
  // writes fail and streams end.
  void ShutdownAll();
  bool draining() const { return draining_.load(); }
  bool stopping() const { return stopping_.load(); }

 private:
  struct Open {
    int fd = -1;
    std::string addr;
    bool pending = true;  // no complete request yet
    bool busy = false;    // a handler runs
    // Pending, or waiting (keep-alive) for its next request's first byte:
    // what counts against its address's share.
    bool unoccupied = false;
    bool evicted = false;                         // shut down to make room
    std::chrono::steady_clock::time_point since;  // accepted, or waiting
  };
  // The connection to shut down to make room for one from `addr`: none if
  // `addr` holds its share of unoccupied connections already
  // (*own_address_over); else the oldest unoccupied one of the address
  // with the most, if over its share. Null if none.
  Open* Victim(const std::string& addr, bool* own_address_over)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetUnoccupied(Open& open, bool unoccupied)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex mu_;
  // Open connections: a descriptor here is open.
  std::unordered_map<const void*, Open> open_ ABSL_GUARDED_BY(mu_);
  // Unoccupied connections (Open::unoccupied), by peer address.
  std::unordered_map<std::string, int> unoccupied_by_addr_ ABSL_GUARDED_BY(mu_);
  int evicted_open_ ABSL_GUARDED_BY(mu_) = 0;  // in open_, evicted
  ConnectionStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::http::internal

#endif  // KVCANARY_COMMON_HTTP_SERVER_STATE_H_
