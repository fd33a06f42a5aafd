// The settings of the HTTP server (common/http_server.h) and what its
// connection cap reports. Shared by the server and its connections
// (common/http_server_state.h).
#ifndef KVCANARY_COMMON_HTTP_OPTIONS_H_
#define KVCANARY_COMMON_HTTP_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "common/tls.h"

namespace kvcanary::http {

struct Options {
  // Connections open at once. A connection is unoccupied while it has not
  // sent a complete request yet, or waits (keep-alive) for its next one;
  // an address's share of unoccupied connections is
  // max_unoccupied_per_address. At the cap, a new connection from an address
  // within its share is made room for: the oldest unoccupied connection of
  // the address most over its share is closed (one waiting for its next
  // request is closed before reading it, so its client may send it
  // again). Connections whose requests are being read or run are never
  // closed for room, so a gateway from whose one address every tenant
  // comes is not throttled for its busy connections. A new connection with
  // no room made (or from an address holding its share already) is
  // answered 503 and closed on the I/O thread (no handler runs).
  int max_connections = 1024;
  int max_unoccupied_per_address = 32;
  // Request line and headers, in full, from the moment the connection is
  // accepted or the request's first byte arrives: 408 and close.
  absl::Duration header_timeout = absl::Seconds(10);
  // Keep-alive: the wait for the next request's first byte; close silently.
  absl::Duration idle_timeout = absl::Seconds(30);
  // The whole body, from the end of the headers: 408 and close.
  absl::Duration body_timeout = absl::Seconds(30);
  size_t max_header_bytes = 16 << 10;  // request line + headers: 431
  size_t max_body_bytes = 1 << 20;     // 413
  // One write of a response (its head and body, or one chunk): past it the
  // connection is shut down and DataSink::write returns false.
  absl::Duration write_timeout = absl::Seconds(30);
  // Handlers running at once; requests beyond wait their turn (FIFO).
  int handler_threads = 64;
  int io_threads = 1;
  // Mutual TLS (common/tls.h): every connection must complete a handshake
  // with a client certificate the deployment CA signed, within
  // header_timeout, before its first request is read; one that does not is
  // closed without an answer (so is one over max_connections). Null: plain
  // HTTP.
  std::shared_ptr<const tls::Context> tls;
};

// What the connection cap has done so far (Server::connection_stats()).
struct ConnectionStats {
  int open = 0;                  // connections open now
  int pending = 0;               // of them, without a complete request yet
  uint64_t refused_cap = 0;      // refused: at the cap, no room to make
  uint64_t refused_address = 0;  // refused: its address holds its share
  uint64_t evicted_idle = 0;     // closed for room: waited for the next
  uint64_t evicted_pending = 0;  // closed for room: no complete request
};

}  // namespace kvcanary::http

#endif  // KVCANARY_COMMON_HTTP_OPTIONS_H_
