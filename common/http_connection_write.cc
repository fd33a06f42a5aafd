// A connection's handler-thread side (common/http_connection.h): running
// the handler, writing its response or streaming its body under
// write_timeout, and the head and error body of every response, whichever
// side writes it.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <exception>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "common/http_connection.h"

namespace kvcanary::http::internal {
namespace {

namespace asio = boost::asio;

}  // namespace

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
