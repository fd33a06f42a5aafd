// The HTTP server's listener: binding, the accept loop that hands each
// socket to a connection (common/http_connection.h), and stopping; the
// routes and settings it shares with its connections live in
// common/http_server_state.h.
#include "common/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
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
#include "common/http_handler_pool.h"
#include "common/http_server_state.h"

namespace kvcanary::http {
namespace {

namespace asio = boost::asio;
using Tcp = asio::ip::tcp;
using ErrorCode = boost::system::error_code;

}  // namespace

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
