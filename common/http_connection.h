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
//
// Its read side and life on the strand are in http_connection.cc, its
// handler thread's side (the response, a streamed body) in
// http_connection_write.cc; it reads and writes through a Stream
// (common/http_stream.h) and answers to the server's ServerState
// (common/http_server_state.h).
#ifndef KVCANARY_COMMON_HTTP_CONNECTION_H_
#define KVCANARY_COMMON_HTTP_CONNECTION_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "boost/asio/steady_timer.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "common/http_message.h"
#include "common/http_server_state.h"
#include "common/http_stream.h"

namespace kvcanary::http::internal {

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
