#include "engine/nodes/decode_stream.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/buffer.hpp"
#include "boost/beast/http/message.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"
#include "common/check.h"
#include "engine/nodes/node_common.h"

namespace kvcanary::engine {
namespace {

namespace beast_http = boost::beast::http;

// How long the router waits to connect to a decode node.
constexpr absl::Duration kConnectTimeout = absl::Seconds(5);
// How long a finished stream waits for the end of its answer.
constexpr absl::Duration kFinishTimeout = absl::Seconds(1);

// The request's bytes on the wire: HTTP/1.1, keep-alive.
std::string RequestBytes(const std::string& url,
                         const std::string& authorization,
                         const std::string& body) {
  absl::string_view host = url;
  host.remove_prefix(host.find("//") + 2);
  if (!host.empty() && host.back() == '/') host.remove_suffix(1);
  beast_http::request<beast_http::string_body> req(beast_http::verb::post,
                                                   "/internal/v1/generate", 11);
  req.set(beast_http::field::host, std::string(host));
  req.set(beast_http::field::content_type, "application/json");
  req.set(beast_http::field::authorization, authorization);
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  std::ostringstream out;
  out << req;
  return out.str();
}

}  // namespace

DecodeStream::DecodeStream(const std::string& url, std::string authorization,
                           std::string body, absl::Duration timeout,
                           NodePool* pool)
    : wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  CHECK_GE(wake_fd_, 0) << "eventfd";
  reuse_cancelled_ = pool->reuse_cancelled();
  thread_ = std::thread([this, url, authorization = std::move(authorization),
                         body = std::move(body), timeout, pool] {
    const absl::Status status = Run(url, authorization, body, timeout, pool);
    absl::MutexLock lock(&mu_);
    done_ = true;
    if (!status.ok() && !cancel_.load()) {
      transport_ = absl::UnavailableError(
          absl::StrCat("decode node ", url, ": ", status.message()));
    }
  });
}

DecodeStream::~DecodeStream() {
  {
    // The node's last line came: the end of its answer is a moment behind
    // (the last chunk), and the connection goes back to the pool once read.
    absl::MutexLock lock(&mu_);
    if (final_line_) {
      mu_.AwaitWithTimeout(absl::Condition(&done_), kFinishTimeout);
    }
  }
  Cancel();
  thread_.join();
  ::close(wake_fd_);
}

void DecodeStream::Cancel() {
  absl::MutexLock lock(&mu_);
  cancel_.store(true);
  // The node is told at once, from this thread, as the connection is cut
  // (unless the fault keeps it for the pool).
  if (connection_ != nullptr && (headers_ || !reuse_cancelled_)) {
    connection_->Shutdown();
  }
  const uint64_t one = 1;
  // The eventfd stays readable: every later wait of the thread ends too.
  (void)!::write(wake_fd_, &one, sizeof(one));
}

absl::Status DecodeStream::Run(const std::string& url,
                               const std::string& authorization,
                               const std::string& body, absl::Duration timeout,
                               NodePool* pool) {
  const std::string request = RequestBytes(url, authorization, body);
  for (int attempt = 0;; ++attempt) {
    if (cancel_.load()) return absl::CancelledError("given up");
    absl::StatusOr<NodePool::Lease> lease =
        pool->Acquire(url, absl::Now() + kConnectTimeout);
    if (!lease.ok()) return lease.status();
    NodeConnection& connection = *lease->connection;
    {
      absl::MutexLock lock(&mu_);
      if (cancel_.load()) return absl::CancelledError("given up");
      connection_ = &connection;
    }
    bool received = !connection.buffer().empty();
    absl::Status status =
        connection.Write(request, absl::Now() + timeout, wake_fd_);
    const bool sent = status.ok();
    bool keep_alive = false;
    if (sent) {
      status = ReadResponse(connection, timeout, &received, &keep_alive);
    }
    bool headers;
    {
      absl::MutexLock lock(&mu_);
      headers = headers_;
      connection_ = nullptr;
    }
    if (status.ok()) {
      if (keep_alive) pool->Release(url, std::move(lease->connection));
      return status;
    }
    if (absl::IsCancelled(status) && sent && !headers) {
      pool->ReleaseCancelled(url, std::move(lease->connection));
      return status;
    }
    // A kept connection the node closed (or reset) before it answered
    // anything: once more, on a new one. Not after a timeout: the node may
    // still be working on it.
    if (lease->reused && !received && absl::IsUnavailable(status) &&
        attempt == 0) {
      continue;
    }
    return status;
  }
}

absl::Status DecodeStream::ReadResponse(NodeConnection& connection,
                                        absl::Duration timeout, bool* received,
                                        bool* keep_alive) {
  beast_http::response_parser<beast_http::string_body> parser;
  parser.body_limit(boost::none);  // a stream; its lines are taken as parsed
  parser.eager(true);
  std::string& buffer = connection.buffer();
  // Takes what was parsed: the status once, and the body so far.
  auto absorb = [&] {
    if (!parser.is_header_done()) return;
    absl::MutexLock lock(&mu_);
    if (!headers_) {
      headers_ = true;
      http_status_ = parser.get().result_int();
    }
    OnBody(parser.get().body());
  };
  while (true) {
    while (!buffer.empty() && !parser.is_done()) {
      boost::beast::error_code ec;
      const size_t n = parser.put(boost::asio::buffer(buffer), ec);
      buffer.erase(0, n);
      // A put may parse some (the header, a chunk) and still say it needs
      // more: what it parsed is taken first.
      absorb();
      if (ec == beast_http::error::need_more) break;
      if (ec) {
        return absl::DataLossError(
            absl::StrCat("malformed HTTP answer: ", ec.message()));
      }
      if (n == 0) break;
    }
    if (parser.is_done()) {
      *keep_alive = parser.get().keep_alive();
      return absl::OkStatus();
    }
    if (cancel_.load()) return absl::CancelledError("given up");
    absl::StatusOr<size_t> n = connection.Read(absl::Now() + timeout, wake_fd_);
    if (!n.ok()) return n.status();
    if (*n > 0) {
      *received = true;
      continue;
    }
    // The node ended the stream: an answer without a length ends here. An
    // end before any byte of an answer is no answer (Beast's put_eof would
    // call it a complete, default 200 response).
    if (!parser.got_some()) {
      return absl::UnavailableError(
          "the node closed the connection before answering");
    }
    boost::beast::error_code ec;
    parser.put_eof(ec);
    if (!ec && parser.is_done()) {
      absorb();
      *keep_alive = false;
      return absl::OkStatus();
    }
    return absl::UnavailableError(
        "the node closed the connection before its answer ended");
  }
}

void DecodeStream::OnBody(std::string& body) {
  if (body.empty()) return;
  if (http_status_ != 200) {
    error_body_.append(body);
    body.clear();
    return;
  }
  buffer_.append(body);
  body.clear();
  size_t nl;
  while ((nl = buffer_.find('\n')) != std::string::npos) {
    auto j = nlohmann::json::parse(buffer_.substr(0, nl), nullptr, false);
    buffer_.erase(0, nl + 1);
    if (!j.is_object()) continue;
    if (j.contains("finish_reason")) final_line_ = true;
    lines_.push_back(std::move(j));
  }
}

absl::Status DecodeStream::WaitHeaders() {
  absl::MutexLock lock(&mu_);
  auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return headers_ || done_;
  };
  mu_.Await(absl::Condition(&answered));
  if (!headers_) {
    // Ended with no error recorded: given up (Cancel()).
    return transport_.ok() ? absl::CancelledError("the request was given up")
                           : transport_;
  }
  if (http_status_ == 200) return absl::OkStatus();
  mu_.Await(absl::Condition(&done_));
  const absl::Status node =
      StatusFromInternalResponse(http_status_, error_body_);
  if (absl::IsAlreadyExists(node)) {
    // 409: the node had read this request before the connection it came on
    // closed (Run sent it again on a new one) and runs it once; its answer
    // went nowhere. A bad upstream answer for the client: 502.
    return absl::DataLossError(
        "the decode node had already accepted this request when the router "
        "sent it again (the connection it first went on closed before any "
        "answer); it is run once and its answer is lost: retry");
  }
  return node;
}

nlohmann::json DecodeStream::error_json() {
  absl::MutexLock lock(&mu_);
  if (!headers_ || http_status_ == 200) return nullptr;
  auto j = nlohmann::json::parse(error_body_, nullptr, false);
  return j.is_object() ? j : nlohmann::json();
}

std::optional<nlohmann::json> DecodeStream::Next() {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !lines_.empty() || done_;
  };
  mu_.Await(absl::Condition(&ready));
  if (lines_.empty()) return std::nullopt;
  nlohmann::json j = std::move(lines_.front());
  lines_.pop_front();
  return j;
}

absl::Status DecodeStream::transport() {
  absl::MutexLock lock(&mu_);
  return transport_.ok() ? absl::UnavailableError("decode stream ended early")
                         : transport_;
}

}  // namespace kvcanary::engine
