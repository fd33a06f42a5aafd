// One accepted connection of the HTTP server (common/http_server.h), from
// accept to close. Internal to the server.
//
// Its life: read a request asynchronously on the connection's strand (the
// wait for its first byte under idle_timeout, its line and headers under
// header_timeout, its body under body_timeout); route it; run the handler on a
// handler thread, which writes the response synchronously, each write under
// write_timeout; back to the strand for the next request (pipelined ones are
// already in the buffer). Errors the layer answers itself are written
// asynchronously on the strand. A connection that is closed after an answer
// stops sending, then reads and drops what the client still sends for a
// moment (a lingering close), so the client is not reset before it reads the
// answer.
//
// Thread-safety: the strand and the handler thread take turns; only one of
// them touches the connection at a time. Stop() may shut the socket down
// (by descriptor, under the server's lock) at any time.
#ifndef KVCANARY_COMMON_HTTP_CONNECTION_H_
#define KVCANARY_COMMON_HTTP_CONNECTION_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/buffer.hpp"
#include "boost/asio/compose.hpp"
#include "boost/asio/error.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "common/http_handler_pool.h"
#include "common/http_server.h"
#include "common/tls.h"

namespace kvcanary::http::internal {

using Tcp = boost::asio::ip::tcp;
// The connection's strand: the socket is accepted onto one.
using Strand = boost::asio::any_io_executor;

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

// What a connection reads and writes through, as Beast's AsyncReadStream and
// AsyncWriteStream: the socket itself, or a TLS session over it (each call
// tries the session, and waits on the socket for the direction the session
// asks for). Used on the strand only.
class Stream {
 public:
  using executor_type = Strand;

  explicit Stream(Tcp::socket& socket) : socket_(socket) {}

  executor_type get_executor() { return socket_.get_executor(); }
  // Null: plain TCP.
  tls::Session* session() const { return session_.get(); }
  void set_session(std::unique_ptr<tls::Session> session) {
    session_ = std::move(session);
  }

  template <typename Buffers, typename Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    if (session_ == nullptr) {
      return socket_.async_read_some(buffers, std::forward<Token>(token));
    }
    return boost::asio::async_compose<Token,
                                      void(boost::system::error_code, size_t)>(
        TlsOp<boost::asio::mutable_buffer, /*kWrite=*/false>{
            socket_, *session_, First<boost::asio::mutable_buffer>(buffers)},
        token, socket_);
  }

  template <typename Buffers, typename Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    if (session_ == nullptr) {
      return socket_.async_write_some(buffers, std::forward<Token>(token));
    }
    return boost::asio::async_compose<Token,
                                      void(boost::system::error_code, size_t)>(
        TlsOp<boost::asio::const_buffer, /*kWrite=*/true>{
            socket_, *session_, First<boost::asio::const_buffer>(buffers)},
        token, socket_);
  }

 private:
  // The first non-empty buffer of a sequence (an empty one if none): a
  // read_some or write_some may move fewer bytes than offered.
  template <typename Buffer, typename Buffers>
  static Buffer First(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() > 0) return b;
    }
    return Buffer();
  }

  // One read_some or write_some through the session.
  template <typename Buffer, bool kWrite>
  struct TlsOp {
    Tcp::socket& socket;
    tls::Session& session;
    Buffer buffer;

    template <typename Self>
    void operator()(Self& self, boost::system::error_code ec = {}) {
      if (ec) return self.complete(ec, 0);
      if (buffer.size() == 0) return self.complete(ec, 0);
      size_t n = 0;
      tls::Io io;
      if constexpr (kWrite) {
        io = session.Write(static_cast<const char*>(buffer.data()),
                           buffer.size(), &n);
      } else {
        io = session.Read(static_cast<char*>(buffer.data()), buffer.size(), &n);
      }
      switch (io) {
        case tls::Io::kOk:
          return self.complete(ec, n);
        case tls::Io::kWantRead:
          return socket.async_wait(Tcp::socket::wait_read, std::move(self));
        case tls::Io::kWantWrite:
          return socket.async_wait(Tcp::socket::wait_write, std::move(self));
        case tls::Io::kClosed:
          return self.complete(boost::asio::error::eof, 0);
        case tls::Io::kFailed:
          return self.complete(boost::asio::error::connection_reset, 0);
      }
    }
  };

  Tcp::socket& socket_;
  std::unique_ptr<tls::Session> session_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerState* server, Tcp::socket socket);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Registers the connection and starts reading (over the cap: answers 503
  // and closes).
  void Start();

 private:
  class Sink;
  enum class Framing { kLength, kChunked, kUntilClose };
  enum class Next { kRead, kLinger, kClose };

  // --- On the strand ---
  // Mutual TLS: the handshake, within header_timeout, then ReadRequest.
  void Handshake();
  void ContinueHandshake();
  void ReadRequest();
  void WaitFirstByte();
  void ReadHeader();
  void OnHeader(boost::system::error_code ec);
  // "Expect: 100-continue": 100 and the body if the route exists and the
  // server's expect-continue handler agrees; its answer otherwise.
  void AnswerExpectContinue();
  void ContinueThenReadBody();
  void ReadBody();
  void OnBody(boost::system::error_code ec);
  void OnReadError(boost::system::error_code ec);
  void FillRequestHead();
  void Dispatch();
  // Writes the layer's own answer `status`, then goes on or closes.
  void AnswerError(int status, bool keep_alive);
  // Writes `res` (the error handler filling an empty error body), then
  // goes on or closes.
  void AnswerOnStrand(Response& res, bool keep_alive);
  void Continue(Next next);
  void LingeringClose();
  void Drain();
  void Close();
  void ArmTimer(absl::Duration timeout);
  // Cancels the deadline; whether it had passed.
  bool DisarmTimer();

  // --- On a handler thread ---
  void RunHandler(const Handler* handler);
  bool WriteResponse(Response& res, bool* keep_alive);
  // Sends all of `data` within write_timeout; false (and the socket shut
  // down) otherwise.
  bool WriteAll(absl::string_view data);
  // Writes some of `data` without blocking: the bytes written, 0 with
  // *wait_events set to what to poll for, or -1 once the connection failed.
  ssize_t WriteSome(absl::string_view data, short* wait_events);
  // Whether the client closed or reset the connection (bytes it sent and
  // we have not read yet count as still there).
  bool PeerGone() const;

  // --- Either ---
  void FillError(Response& res) const;
  std::string Head(const Response& res, bool keep_alive, Framing framing,
                   size_t content_length) const;

  ServerState* const server_;
  Strand strand_;
  Tcp::socket socket_;
  Stream stream_{socket_};  // after socket_
  boost::asio::steady_timer timer_;
  int fd_ = -1;
  std::string remote_addr_;
  bool registered_ = false;

  boost::beast::flat_buffer buffer_;
  std::optional<
      boost::beast::http::request_parser<boost::beast::http::string_body>>
      parser_;
  Request request_;
  bool keep_alive_ = false;
  bool first_request_ = true;  // its header deadline runs from the accept
  std::string write_buffer_;   // an asynchronous write's bytes
  std::unique_ptr<char[]> drain_buffer_;
  size_t drained_bytes_ = 0;
  uint64_t timer_generation_ = 0;
  bool timed_out_ = false;
  bool closed_ = false;
};

}  // namespace kvcanary::http::internal

#endif  // KVCANARY_COMMON_HTTP_CONNECTION_H_
