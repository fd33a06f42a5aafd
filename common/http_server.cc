#include "common/http_server.h"

#include <sys/socket.h>

#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "common/check.h"
#include "common/http_connection.h"

namespace kvcanary::http {
namespace {

namespace asio = boost::asio;
using Tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;

bool HasCrLf(absl::string_view s) {
  return s.find_first_of("\r\n") != absl::string_view::npos;
}

const std::string* FindHeader(const Headers& headers, absl::string_view name) {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

}  // namespace

// --- Request, Response -----------------------------------------------------

std::string Request::get_header_value(absl::string_view name) const {
  const std::string* value = FindHeader(headers, name);
  return value == nullptr ? std::string() : *value;
}

bool Request::has_header(absl::string_view name) const {
  return FindHeader(headers, name) != nullptr;
}

size_t Request::get_header_value_count(absl::string_view name) const {
  size_t n = 0;
  for (const auto& [field, value] : headers) {
    if (absl::EqualsIgnoreCase(field, name)) ++n;
  }
  return n;
}

Response::~Response() {
  if (releaser_) releaser_(provider_success_);
}

void Response::set_header(absl::string_view name, absl::string_view value) {
  if (HasCrLf(name) || HasCrLf(value)) return;  // no field injection
  for (auto it = headers.begin(); it != headers.end();) {
    it = absl::EqualsIgnoreCase(it->first, name) ? headers.erase(it) : it + 1;
  }
  headers.emplace_back(std::string(name), std::string(value));
}

bool Response::has_header(absl::string_view name) const {
  return FindHeader(headers, name) != nullptr;
}

std::string Response::get_header_value(absl::string_view name) const {
  const std::string* value = FindHeader(headers, name);
  return value == nullptr ? std::string() : *value;
}

void Response::set_content(std::string content,
                           absl::string_view content_type) {
  body = std::move(content);
  set_header("Content-Type", content_type);
}

void Response::set_chunked_content_provider(
    absl::string_view content_type, ContentProvider provider,
    ContentProviderResourceReleaser releaser) {
  set_header("Content-Type", content_type);
  body.clear();
  provider_ = std::move(provider);
  releaser_ = std::move(releaser);
}

namespace {

// The reason phrase of each status this server knows, in status order.
struct StatusPhrase {
  int status;
  absl::string_view reason;
};
constexpr StatusPhrase kStatusPhrases[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {206, "Partial Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {402, "Payment Required"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Payload Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"},
    {422, "Unprocessable Entity"},
    {425, "Too Early"},
    {426, "Upgrade Required"},
    {428, "Precondition Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {451, "Unavailable For Legal Reasons"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
};

}  // namespace

absl::string_view StatusReason(int status) {
  for (const StatusPhrase& phrase : kStatusPhrases) {
    if (phrase.status == status) return phrase.reason;
  }
  return "";
}

// --- Server ----------------------------------------------------------------

class Server::Impl {
 public:
  explicit Impl(Options options)
      : state(options),
        io(std::make_unique<asio::io_context>(
            std::max(1, options.io_threads))) {}
  ~Impl() { Stop(); }

  absl::StatusOr<int> Bind(const std::string& host, int port);
  void Start();
  void StopListening();
  void Stop();

  internal::ServerState state;

 private:
  void Accept();

  std::unique_ptr<asio::io_context> io;
  std::optional<Tcp::acceptor> acceptor_;
  std::optional<asio::steady_timer> accept_retry_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>>
      work_;
  std::vector<std::thread> io_threads_;
  // The listener's descriptor while it is open (-1 after), for
  // StopListening() from any thread.
  absl::Mutex listen_mu_;
  int listen_fd_ ABSL_GUARDED_BY(listen_mu_) = -1;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

absl::StatusOr<int> Server::Impl::Bind(const std::string& host, int port) {
  ErrorCode ec;
  Tcp::resolver resolver(*io);
  const auto endpoints =
      resolver.resolve(host, std::to_string(port), Tcp::resolver::passive, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", ec.message()));
  }
  std::string why = "no address";
  for (const auto& entry : endpoints) {
    Tcp::acceptor acceptor(*io);
    const Tcp::endpoint endpoint = entry.endpoint();
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(Tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      why = ec.message();
      continue;
    }
    const int bound = acceptor.local_endpoint(ec).port();
    if (ec) return absl::InternalError(ec.message());
    acceptor_.emplace(std::move(acceptor));
    accept_retry_.emplace(*io);
    absl::MutexLock lock(&listen_mu_);
    listen_fd_ = acceptor_->native_handle();
    return bound;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot bind ", host, ":", port, ": ", why));
}

void Server::Impl::Start() {
  work_.emplace(io->get_executor());
  asio::post(*io, [this] { Accept(); });
  for (int i = 0; i < std::max(1, state.options.io_threads); ++i) {
    io_threads_.emplace_back([this] { io->run(); });
  }
}

void Server::Impl::Accept() {
  // Each connection's socket lives on a strand of its own.
  acceptor_->async_accept(asio::make_strand(*io), [this](ErrorCode ec,
                                                         Tcp::socket socket) {
    if (state.draining()) return;  // `socket` closes with it
    if (ec) {
      // E.g. out of descriptors: try again shortly, without spinning.
      accept_retry_->expires_after(std::chrono::milliseconds(50));
      accept_retry_->async_wait([this](ErrorCode wait) {
        if (!wait) Accept();
      });
      return;
    }
    std::make_shared<internal::Connection>(&state, std::move(socket))->Start();
    Accept();
  });
}

void Server::Impl::StopListening() {
  {
    // Shutting a listening socket down makes the kernel refuse new
    // connections at once and ends the pending accept; the acceptor itself
    // is closed by Stop(), on no I/O thread.
    absl::MutexLock lock(&listen_mu_);
    if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  }
  state.Drain();
}

void Server::Impl::Stop() {
  CHECK(!internal::HandlerPool::OnPoolThread())
      << "http::Server::Stop() from a handler would wait for itself; use "
         "StopListening()";
  absl::MutexLock lock(&stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  StopListening();
  // Every open connection is shut down, so reads end on the strands and
  // handlers' writes fail.
  state.ShutdownAll();
  // Running handlers finish (their writes fail); queued ones are dropped.
  state.pool.Stop();
  work_.reset();
  io->stop();
  for (std::thread& t : io_threads_) t.join();
  io_threads_.clear();
  accept_retry_.reset();
  {
    absl::MutexLock listen_lock(&listen_mu_);
    listen_fd_ = -1;
  }
  acceptor_.reset();  // closes the listener
  // Destroys what the I/O threads left pending, and the connections with it.
  io.reset();
}

Server::Server(Options options) : impl_(std::make_unique<Impl>(options)) {}

Server::~Server() { Stop(); }

void Server::Get(const std::string& path, Handler handler) {
  // A second handler for a path would silently replace the first (and with
  // it whatever the first checked): a programming error.
  CHECK(impl_->state.get_routes.emplace(path, std::move(handler)).second)
      << "GET " << path << " registered twice";
}

void Server::Post(const std::string& path, Handler handler) {
  CHECK(impl_->state.post_routes.emplace(path, std::move(handler)).second)
      << "POST " << path << " registered twice";
}

void Server::set_error_handler(Handler handler) {
  impl_->state.error_handler = std::move(handler);
}

void Server::set_expect_continue_handler(ExpectContinueHandler handler) {
  impl_->state.expect_continue_handler = std::move(handler);
}

void Server::set_not_found_handler(Handler handler) {
  impl_->state.not_found_handler = std::move(handler);
}

void Server::set_default_headers(Headers headers) {
  impl_->state.default_headers = std::move(headers);
}

absl::StatusOr<int> Server::Bind(const std::string& host, int port) {
  auto bound = impl_->Bind(host, port);
  if (bound.ok()) port_ = *bound;
  return bound;
}

void Server::Start() {
  impl_->Start();
  running_.store(true);
}

void Server::StopListening() { impl_->StopListening(); }

ConnectionStats Server::connection_stats() const {
  return impl_->state.stats();
}

void Server::Stop() {
  impl_->Stop();
  running_.store(false);
}

}  // namespace kvcanary::http
