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
// Request, Response and the handler types (common/http_message.h) and
// Options (common/http_options.h) come with this header: its users include
// it alone.
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
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_message.h"
#include "common/http_options.h"

namespace kvcanary::http {

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

}  // namespace kvcanary::http

#endif  // KVCANARY_COMMON_HTTP_SERVER_H_
