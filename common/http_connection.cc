// A connection's life on its strand (common/http_connection.h): admission,
// the TLS handshake, reading and parsing each request under its deadlines
// (idle, header, body), "Expect: 100-continue", dispatch to a handler
// thread, the layer's own answers, and the lingering close.
#include "common/http_connection.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/read.hpp"

namespace kvcanary::http::internal {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using ErrorCode = boost::system::error_code;

// How long a closing connection reads and drops what the client still
// sends, and how much of it at most.
constexpr absl::Duration kLingerTimeout = absl::Seconds(2);
constexpr size_t kLingerMaxBytes = size_t{16} << 20;
constexpr size_t kDrainBufferBytes = 16 << 10;
// The bytes read at a time beyond a full header: the buffer's bound.
constexpr size_t kReadAheadBytes = 64 << 10;

bool IsHttpError(const ErrorCode& ec) {
  return ec.category() ==
         bhttp::make_error_code(bhttp::error::bad_method).category();
}

}  // namespace

// --- Connection: set-up and the read side (strand) -------------------------

Connection::Connection(ServerState* server, Tcp::socket socket)
    : server_(server),
      strand_(socket.get_executor()),
      socket_(std::move(socket)),
      timer_(strand_),
      buffer_(server->options.max_header_bytes + kReadAheadBytes) {}

Connection::~Connection() {
  if (registered_) server_->Unregister(this);
}

void Connection::Start() {
  ErrorCode ec;
  socket_.set_option(Tcp::no_delay(true), ec);  // each chunk leaves at once
  socket_.non_blocking(true, ec);  // handler threads write with poll()
  const Tcp::endpoint peer = socket_.remote_endpoint(ec);
  if (!ec) remote_addr_ = peer.address().to_string();
  fd_ = socket_.native_handle();
  const ServerState::Admission admission =
      server_->Register(this, fd_, remote_addr_);
  registered_ = admission == ServerState::Admission::kAdmitted;
  const bool tls = server_->options.tls != nullptr;
  asio::dispatch(strand_, [self = shared_from_this(), admission, tls] {
    switch (admission) {
      case ServerState::Admission::kAdmitted:
        return tls ? self->Handshake() : self->ReadRequest();
      case ServerState::Admission::kOverCap:
      case ServerState::Admission::kAddressOverCap:
        // Over TLS an answer would cost a handshake first.
        if (tls) return self->Close();
        return self->AnswerError(503, /*keep_alive=*/false);
      case ServerState::Admission::kDraining:
        return self->Close();
    }
  });
}

void Connection::Handshake() {
  absl::StatusOr<std::unique_ptr<tls::Session>> session =
      tls::Session::Server(*server_->options.tls, fd_);
  if (!session.ok()) return Close();
  stream_.set_session(*std::move(session));
  ArmTimer(server_->options.header_timeout);
  ContinueHandshake();
}

void Connection::ContinueHandshake() {
  const tls::Io io = stream_.session()->Handshake();
  if (io == tls::Io::kOk) {
    DisarmTimer();
    return ReadRequest();
  }
  if (io != tls::Io::kWantRead && io != tls::Io::kWantWrite) {
    // A refused certificate, or not TLS at all: nothing to answer it in.
    DisarmTimer();
    return Close();
  }
  socket_.async_wait(io == tls::Io::kWantRead ? Tcp::socket::wait_read
                                              : Tcp::socket::wait_write,
                     [self = shared_from_this()](ErrorCode ec) {
                       if (ec || self->timed_out_) {
                         self->DisarmTimer();
                         return self->Close();
                       }
                       self->ContinueHandshake();
                     });
}

void Connection::ReadRequest() {
  if (server_->draining()) return LingeringClose();
  parser_.emplace();
  parser_->header_limit(
      static_cast<uint32_t>(server_->options.max_header_bytes));
  parser_->body_limit(server_->options.max_body_bytes);
  request_ = Request();
  request_.remote_addr = remote_addr_;
  request_.is_connection_closed = [this] { return PeerGone(); };
  // The first request's deadline runs from the accept; a pipelined one's
  // from now; otherwise the idle wait comes first.
  if (first_request_ || buffer_.size() > 0 ||
      (stream_.session() != nullptr && stream_.session()->HasBuffered())) {
    return ReadHeader();
  }
  WaitFirstByte();
}

void Connection::WaitFirstByte() {
  ArmTimer(server_->options.idle_timeout);
  (void)server_->MarkWaiting(this, true);
  socket_.async_wait(Tcp::socket::wait_read,
                     [self = shared_from_this()](ErrorCode ec) {
                       const bool timed_out = self->DisarmTimer();
                       if (ec || timed_out) return self->Close();
                       // Closed to make room: whatever the client sent
                       // since is not read, so it may send it again.
                       if (!self->server_->MarkWaiting(self.get(), false)) {
                         return self->Close();
                       }
                       self->ReadHeader();
                     });
}

void Connection::ReadHeader() {
  ArmTimer(server_->options.header_timeout);
  bhttp::async_read_header(stream_, buffer_, *parser_,
                           [self = shared_from_this()](ErrorCode ec, size_t) {
                             self->OnHeader(ec);
                           });
}

void Connection::OnHeader(ErrorCode ec) {
  const bool timed_out = DisarmTimer();
  if (ec && timed_out) {
    // Silence from a client that sent nothing is closed silently; part of
    // a request is answered.
    if (buffer_.size() > 0 || parser_->got_some()) {
      return AnswerError(408, /*keep_alive=*/false);
    }
    return Close();
  }
  if (ec) return OnReadError(ec);
  FillRequestHead();
  if (request_.get_header_value_count("Authorization") > 1) {
    return AnswerError(400, /*keep_alive=*/false);
  }
  if (parser_->is_done()) return Dispatch();
  if (absl::EqualsIgnoreCase(request_.get_header_value("Expect"),
                             "100-continue")) {
    return AnswerExpectContinue();
  }
  ReadBody();
}

void Connection::AnswerExpectContinue() {
  int status = 0;
  if (server_->Route(request_.method, request_.path, &status) == nullptr) {
    return AnswerError(status, /*keep_alive=*/false);
  }
  if (!server_->expect_continue_handler) return ContinueThenReadBody();
  Response res;
  if (server_->expect_continue_handler(request_, res)) {
    return ContinueThenReadBody();
  }
  AnswerOnStrand(res, /*keep_alive=*/false);
}

void Connection::ContinueThenReadBody() {
  write_buffer_ = "HTTP/1.1 100 Continue\r\n\r\n";
  ArmTimer(server_->options.write_timeout);
  asio::async_write(stream_, asio::buffer(write_buffer_),
                    [self = shared_from_this()](ErrorCode ec, size_t) {
                      const bool timed_out = self->DisarmTimer();
                      if (ec || timed_out) return self->Close();
                      self->ReadBody();
                    });
}

void Connection::ReadBody() {
  ArmTimer(server_->options.body_timeout);
  bhttp::async_read(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](ErrorCode ec, size_t) { self->OnBody(ec); });
}

void Connection::OnBody(ErrorCode ec) {
  const bool timed_out = DisarmTimer();
  if (ec && timed_out) return AnswerError(408, /*keep_alive=*/false);
  if (ec) return OnReadError(ec);
  Dispatch();
}

void Connection::OnReadError(ErrorCode ec) {
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
    FillRequestHead();
    return AnswerError(431, /*keep_alive=*/false);
  }
  if (ec == bhttp::error::body_limit) {
    FillRequestHead();
    return AnswerError(413, /*keep_alive=*/false);
  }
  // The client went away (mid-request or between requests): nobody to
  // answer.
  if (ec == bhttp::error::end_of_stream ||
      ec == bhttp::error::partial_message || !IsHttpError(ec)) {
    return Close();
  }
  AnswerError(400, /*keep_alive=*/false);
}

void Connection::FillRequestHead() {
  const auto& msg = parser_->get();
  request_.method = std::string(msg.method_string());
  request_.target = std::string(msg.target());
  request_.path = request_.target.substr(0, request_.target.find('?'));
  request_.version = msg.version() == 10 ? 10 : 11;
  request_.headers.clear();
  for (const auto& field : msg) {
    request_.headers.emplace_back(std::string(field.name_string()),
                                  std::string(field.value()));
  }
}

void Connection::Dispatch() {
  // A connection closed to make room serves nothing more.
  if (first_request_ && !server_->MarkRequested(this)) return Close();
  first_request_ = false;
  FillRequestHead();
  keep_alive_ = parser_->get().keep_alive();
  request_.body = std::move(parser_->get().body());
  parser_.reset();
  int status = 0;
  const Handler* handler =
      server_->Route(request_.method, request_.path, &status);
  if (handler == nullptr) return AnswerError(status, keep_alive_);
  if (!server_->MarkBusy(this)) return Close();
  if (!server_->pool.Post([self = shared_from_this(), handler] {
        self->RunHandler(handler);
      })) {
    Close();
  }
}

void Connection::AnswerError(int status, bool keep_alive) {
  Response res;
  res.status = status;
  if (status == 405) {
    res.set_header("Allow", server_->AllowedMethods(request_.path));
  }
  AnswerOnStrand(res, keep_alive);
}

void Connection::AnswerOnStrand(Response& res, bool keep_alive) {
  FillError(res);
  const bool head = request_.method == "HEAD";
  write_buffer_ = Head(res, keep_alive, Framing::kLength, res.body.size());
  if (!head) write_buffer_ += res.body;
  ArmTimer(server_->options.write_timeout);
  asio::async_write(
      stream_, asio::buffer(write_buffer_),
      [self = shared_from_this(), keep_alive](ErrorCode ec, size_t) {
        const bool timed_out = self->DisarmTimer();
        if (ec || timed_out) return self->Close();
        self->Continue(keep_alive ? Next::kRead : Next::kLinger);
      });
}

void Connection::Continue(Next next) {
  switch (next) {
    case Next::kRead:
      return ReadRequest();
    case Next::kLinger:
      return LingeringClose();
    case Next::kClose:
      return Close();
  }
}

void Connection::LingeringClose() {
  if (stream_.session() != nullptr) stream_.session()->SendCloseNotify();
  ErrorCode ec;
  socket_.shutdown(Tcp::socket::shutdown_send, ec);
  if (ec) return Close();
  drain_buffer_ = std::make_unique<char[]>(kDrainBufferBytes);
  ArmTimer(kLingerTimeout);  // for the whole drain, not per read
  Drain();
}

void Connection::Drain() {
  socket_.async_read_some(
      asio::buffer(drain_buffer_.get(), kDrainBufferBytes),
      [self = shared_from_this()](ErrorCode ec, size_t n) {
        self->drained_bytes_ += n;
        if (ec || self->timed_out_ || self->drained_bytes_ > kLingerMaxBytes) {
          self->DisarmTimer();
          return self->Close();
        }
        self->Drain();
      });
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  // Out of the registry before the descriptor can be reused.
  if (registered_) server_->Unregister(this);
  registered_ = false;
  ++timer_generation_;
  timer_.cancel();
  ErrorCode ec;
  socket_.close(ec);
}

void Connection::ArmTimer(absl::Duration timeout) {
  timed_out_ = false;
  const uint64_t generation = ++timer_generation_;
  timer_.expires_after(absl::ToChronoNanoseconds(timeout));
  timer_.async_wait([self = shared_from_this(), generation](ErrorCode ec) {
    if (ec || generation != self->timer_generation_) return;
    self->timed_out_ = true;
    ErrorCode ignored;
    self->socket_.cancel(ignored);  // the pending operation fails
  });
}

bool Connection::DisarmTimer() {
  ++timer_generation_;
  timer_.cancel();
  return timed_out_;
}

}  // namespace kvcanary::http::internal
