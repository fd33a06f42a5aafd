#include "common/http_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
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

// --- ServerState -----------------------------------------------------------

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

// --- The streamed body -----------------------------------------------------

class Connection::Sink : public DataSink {
 public:
  Sink(Connection* connection, bool chunked)
      : connection_(connection), chunked_(chunked) {}

  bool write(const char* data, size_t size) override {
    if (failed_ || done_) return false;
    if (size == 0) return true;
    if (connection_->server_->stopping() || connection_->PeerGone()) {
      failed_ = true;
      return false;
    }
    std::string out;
    if (chunked_) {
      out.reserve(size + 16);
      absl::StrAppend(&out, absl::Hex(size), "\r\n");
      out.append(data, size);
      out += "\r\n";
    } else {
      out.assign(data, size);
    }
    if (!connection_->WriteAll(out)) {
      failed_ = true;
      return false;
    }
    offset_ += size;
    return true;
  }

  void done() override {
    if (failed_ || done_) return;
    done_ = true;
    if (chunked_ && !connection_->WriteAll("0\r\n\r\n")) failed_ = true;
  }

  bool is_writable() const override {
    return !failed_ && !connection_->server_->stopping() &&
           !connection_->PeerGone();
  }

  size_t offset() const { return offset_; }
  bool failed() const { return failed_; }
  bool finished() const { return done_; }

 private:
  Connection* const connection_;
  const bool chunked_;
  size_t offset_ = 0;
  bool failed_ = false;
  bool done_ = false;
};

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

// --- The handler thread ----------------------------------------------------

void Connection::RunHandler(const Handler* handler) {
  bool keep_alive = keep_alive_;
  Next next = Next::kClose;
  {
    Response res;
    try {
      (*handler)(request_, res);
    } catch (const std::exception&) {
      res.status = 500;  // what it was is not the client's business
      res.body.clear();
      res.headers.clear();
      res.provider_ = nullptr;
    } catch (...) {
      res.status = 500;
      res.body.clear();
      res.headers.clear();
      res.provider_ = nullptr;
    }
    if (res.status < 100 || res.status > 999) res.status = 500;
    FillError(res);
    if (WriteResponse(res, &keep_alive)) {
      next = keep_alive ? Next::kRead : Next::kLinger;
    }
  }  // the releaser runs before the next request is read
  server_->MarkIdle(this);
  asio::post(strand_,
             [self = shared_from_this(), next] { self->Continue(next); });
}

bool Connection::WriteResponse(Response& res, bool* keep_alive) {
  const bool head = request_.method == "HEAD";
  if (server_->draining()) *keep_alive = false;
  if (!res.provider_) {
    std::string out = Head(res, *keep_alive, Framing::kLength, res.body.size());
    if (!head) out += res.body;
    return WriteAll(out);
  }
  // HTTP/1.0 has no chunks: the body ends with the connection.
  const bool chunked = request_.version >= 11;
  if (!chunked) *keep_alive = false;
  if (!WriteAll(Head(res, *keep_alive,
                     chunked ? Framing::kChunked : Framing::kUntilClose, 0))) {
    return false;
  }
  if (head) return true;
  Sink sink(this, chunked);
  while (!sink.finished() && !server_->stopping()) {
    if (!sink.is_writable() || !res.provider_(sink.offset(), sink) ||
        sink.failed()) {
      break;
    }
  }
  res.provider_success_ = sink.finished() && !sink.failed();
  return res.provider_success_;
}

bool Connection::WriteAll(absl::string_view data) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + absl::ToChronoMilliseconds(server_->options.write_timeout);
  while (!data.empty()) {
    short wait_events = 0;
    const ssize_t n = WriteSome(data, &wait_events);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - Clock::now())
                          .count();
    pollfd p{fd_, wait_events, 0};
    const int ready = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready > 0 && (p.revents & (POLLERR | POLLNVAL)) == 0 &&
        (wait_events == POLLIN || (p.revents & POLLHUP) == 0)) {
      continue;
    }
    if (ready == 0) ::shutdown(fd_, SHUT_RDWR);  // the client stopped reading
    return false;
  }
  return true;
}

ssize_t Connection::WriteSome(absl::string_view data, short* wait_events) {
  if (tls::Session* session = stream_.session()) {
    size_t n = 0;
    switch (session->Write(data.data(), data.size(), &n)) {
      case tls::Io::kOk:
        return static_cast<ssize_t>(n);
      case tls::Io::kWantRead:
        *wait_events = POLLIN;
        return 0;
      case tls::Io::kWantWrite:
        *wait_events = POLLOUT;
        return 0;
      case tls::Io::kClosed:
      case tls::Io::kFailed:
        return -1;
    }
  }
  while (true) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) return n;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      *wait_events = POLLOUT;
      return 0;
    }
    return -1;
  }
}

bool Connection::PeerGone() const {
  pollfd p{fd_, POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if ((p.revents & POLLRDHUP) == 0) return false;
  char byte;
  return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// --- Either side -----------------------------------------------------------

void Connection::FillError(Response& res) const {
  if (res.status < 400 || !res.body.empty() || res.provider_ ||
      !server_->error_handler) {
    return;
  }
  try {
    server_->error_handler(request_, res);
  } catch (const std::exception&) {
    // The status stands, with no body.
  }
}

std::string Connection::Head(const Response& res, bool keep_alive,
                             Framing framing, size_t content_length) const {
  std::string out = absl::StrCat("HTTP/1.1 ", res.status, " ",
                                 StatusReason(res.status), "\r\n");
  auto field = [&out](absl::string_view name, absl::string_view value) {
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  };
  for (const auto& [name, value] : server_->default_headers) {
    if (!res.has_header(name)) field(name, value);
  }
  for (const auto& [name, value] : res.headers) {
    // The framing is the layer's.
    if (absl::EqualsIgnoreCase(name, "Content-Length") ||
        absl::EqualsIgnoreCase(name, "Transfer-Encoding") ||
        absl::EqualsIgnoreCase(name, "Connection")) {
      continue;
    }
    field(name, value);
  }
  if (!res.has_header("Content-Type") &&
      (content_length > 0 || framing != Framing::kLength)) {
    field("Content-Type", "text/plain");
  }
  switch (framing) {
    case Framing::kLength:
      field("Content-Length", absl::StrCat(content_length));
      break;
    case Framing::kChunked:
      field("Transfer-Encoding", "chunked");
      break;
    case Framing::kUntilClose:
      break;
  }
  if (!keep_alive) {
    field("Connection", "close");
  } else {
    if (request_.version == 10) field("Connection", "keep-alive");
    field("Keep-Alive",
          absl::StrCat("timeout=",
                       absl::ToInt64Seconds(server_->options.idle_timeout)));
  }
  out += "\r\n";
  return out;
}

}  // namespace kvcanary::http::internal
