// The HTTP/1.1 server of every listener (router, nodes, auditor sidecar,
// test fakes), on Boost.Beast, for a hostile network: pipelined requests are
// all answered in order, the request line and headers must arrive within
// one overall deadline (slowloris), bodies and headers are capped, and the
// number of connections is capped. Its API is the subset of cpp-httplib's
// server the project used, so handlers read the same:
//
//   http::Server server(options);
//   server.Get("/health", [](const http::Request& req, http::Response& res) {
//     res.set_content("{\"status\":\"ok\"}", "application/json");
//   });
//   ASSIGN_OR_RETURN(int port, server.Bind("127.0.0.1", 0));
//   server.Start();
//   ...
//   server.Stop();
//
// Model: one io_context, run by `io_threads` I/O threads, does every accept
// and every read asynchronously, with deadlines; an idle or slow connection
// costs a socket and a few KiB, never a thread. A complete request goes to a
// handler thread, which runs the handler and writes the response
// synchronously (each write under `write_timeout`); the connection then goes
// back to asynchronous reading. Only the OpenAI-facing error bodies are the
// caller's business (set_error_handler).
//
// Errors the layer answers itself, with the status set and the body left to
// the error handler: 400 (malformed request, or more than one Authorization
// field: which one a handler would read is a guess a proxy may make
// differently), 404 (unknown path), 405 (known
// path, other method), 408 (request line and headers, or the body, not in
// time), 413 (body over max_body_bytes; refused from Content-Length before it
// is read), 431 (header over max_header_bytes), 503 (over max_connections),
// 500 (a handler threw).
//
// With Options::tls set, the listener speaks HTTPS and requires a client
// certificate from the deployment's CA (mutual TLS between nodes).
#ifndef KVCANARY_COMMON_HTTP_SERVER_H_
#define KVCANARY_COMMON_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/tls.h"

namespace kvcanary::http {

namespace internal {
class Connection;
}  // namespace internal

// Header fields in the order they were set; names compare without case.
using Headers = std::vector<std::pair<std::string, std::string>>;

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

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target up to '?', as sent
  std::string target;  // the whole request target
  std::string body;
  Headers headers;
  std::string remote_addr;  // the peer's IP address
  int version = 11;         // 10: HTTP/1.0, 11: HTTP/1.1
  // Whether the client has hung up (closed its side with nothing left to
  // read), as cpp-httplib's member of the same name: for a handler that
  // waits on other work before it answers. Cheap (one poll()); callable
  // from any thread while the handler runs. Unset outside the server.
  std::function<bool()> is_connection_closed;

  // The first field named `name` (any case), "" if none.
  std::string get_header_value(absl::string_view name) const;
  bool has_header(absl::string_view name) const;
  // How many fields are named `name` (any case).
  size_t get_header_value_count(absl::string_view name) const;
};

// Where a streamed (chunked) response body goes. Handed to a content
// provider on the handler thread; not thread-safe.
class DataSink {
 public:
  virtual ~DataSink() = default;
  // Sends `size` bytes as one chunk, flushed at once. False once the client
  // is gone, the write deadline passed or the server is stopping (and from
  // then on).
  virtual bool write(const char* data, size_t size) = 0;
  // Ends the body (the last chunk); the provider is not called again.
  virtual void done() = 0;
  // Whether the client is still there to write to.
  virtual bool is_writable() const = 0;
};

// Called with the bytes written so far, again and again, until it returns
// false (the response is cut off and the connection closed) or calls
// sink.done().
using ContentProvider = std::function<bool(size_t offset, DataSink& sink)>;
// Called once the response is finished with: true if the streamed body was
// sent in full.
using ContentProviderResourceReleaser = std::function<void(bool success)>;

// Not thread-safe; owned by the handler thread.
class Response {
 public:
  Response() = default;
  Response(const Response&) = delete;
  Response& operator=(const Response&) = delete;
  ~Response();  // runs the releaser, if any

  int status = 200;
  std::string body;
  Headers headers;

  // Replaces any field of that name.
  void set_header(absl::string_view name, absl::string_view value);
  bool has_header(absl::string_view name) const;
  std::string get_header_value(absl::string_view name) const;
  void set_content(std::string body, absl::string_view content_type);
  // The body comes from `provider`, sent with Transfer-Encoding: chunked.
  void set_chunked_content_provider(
      absl::string_view content_type, ContentProvider provider,
      ContentProviderResourceReleaser releaser = nullptr);

 private:
  friend class internal::Connection;
  ContentProvider provider_;
  ContentProviderResourceReleaser releaser_;
  bool provider_success_ = false;
};

using Handler = std::function<void(const Request&, Response&)>;
// Decides, from a request's line and headers alone (its body is not read
// yet), whether the client that sent "Expect: 100-continue" may send the
// body: true to answer "100 Continue" and read it; false to answer `res`
// instead (its status set; the error handler fills an empty body) and
// close the connection without reading the body. Runs on an I/O thread:
// must not block.
using ExpectContinueHandler = std::function<bool(const Request&, Response&)>;

// What the connection cap has done so far (Server::connection_stats()).
struct ConnectionStats {
  int open = 0;                  // connections open now
  int pending = 0;               // of them, without a complete request yet
  uint64_t refused_cap = 0;      // refused: at the cap, no room to make
  uint64_t refused_address = 0;  // refused: its address holds its share
  uint64_t evicted_idle = 0;     // closed for room: waited for the next
  uint64_t evicted_pending = 0;  // closed for room: no complete request
};

// Routes and options are set before Bind(); Bind, Start and Stop are called
// from one thread. Handlers run on handler threads, many at once; the error
// handler may run on an I/O thread too and must not block.
class Server {
 public:
  explicit Server(Options options = {});
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Exact path match (the target up to '?'); a GET route answers HEAD too.
  void Get(const std::string& path, Handler handler);
  void Post(const std::string& path, Handler handler);
  // Fills in error responses that have no body yet: the layer's own (see
  // the file comment) and a handler's with status >= 400 and no body.
  void set_error_handler(Handler handler);
  // Runs, on a handler thread, for a request whose path no route serves
  // with any method (instead of the 404).
  void set_not_found_handler(Handler handler);
  // Consulted for a request with "Expect: 100-continue" whose route
  // exists (an unknown path or method is answered at once, 404 or 405,
  // without a 100); unset, every such request gets its 100 Continue.
  void set_expect_continue_handler(ExpectContinueHandler handler);
  // Sent on every response unless the handler set the same field.
  void set_default_headers(Headers headers);

  // Listens on host:port (0: any free port); returns the bound port.
  // kUnavailable if it cannot.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Serves on the server's own threads. REQUIRES: Bind() succeeded.
  void Start();
  // Refuses new connections from now on and closes the open ones once
  // they are not running a handler (a running one still writes its
  // response). Returns at once; callable from any thread, handlers
  // included (as cpp-httplib's stop()). Idempotent.
  void StopListening();
  // StopListening(), closes every connection, lets running handlers see
  // their writes fail, and joins every thread once they return.
  // Idempotent. REQUIRES: not called from a handler (use StopListening()).
  void Stop();

  int port() const { return port_; }
  bool is_running() const { return running_.load(); }
  // Thread-safe.
  ConnectionStats connection_stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<bool> running_{false};
};

// The reason phrase of an HTTP status ("Not Found"); "" if unknown.
absl::string_view StatusReason(int status);

}  // namespace kvcanary::http

#endif  // KVCANARY_COMMON_HTTP_SERVER_H_
