// The HTTP server tests' raw loopback client (plain or over mutual TLS),
// their request builders and the fixture serving /hello, /echo, /throw and
// /stream: shared by tests/common/http_server_test.cc and
// http_server_tls_test.cc.
#ifndef KVCANARY_TESTS_COMMON_HTTP_SERVER_FIXTURE_H_
#define KVCANARY_TESTS_COMMON_HTTP_SERVER_FIXTURE_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/tls_fixtures.h"

namespace kvcanary::http::testing {
using ::testing::HasSubstr;

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// A blocking loopback client that reads responses off a raw socket, or off
// a TLS session over it (mutual TLS: it presents `tls`'s certificate).
class RawClient {
 public:
  // `from`: the loopback address to connect from (another than 127.0.0.1
  // plays another client machine).
  explicit RawClient(int port, const tls::Context* tls = nullptr,
                     const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from != nullptr) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &local.sin_addr);
      ::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ =
        ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int yes = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    if (tls == nullptr || !connected_) return;
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
    auto session = tls::Session::Client(*tls, fd_, "127.0.0.1");
    connected_ =
        session.ok() &&
        tls::HandshakeUntil(**session, fd_, absl::Now() + absl::Seconds(5))
            .ok();
    if (session.ok()) session_ = *std::move(session);
  }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void Close() {
    session_.reset();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool Send(absl::string_view data) {
    while (!data.empty()) {
      if (session_ != nullptr) {
        size_t n = 0;
        const tls::Io io = session_->Write(data.data(), data.size(), &n);
        if (io == tls::Io::kOk) {
          data.remove_prefix(n);
          continue;
        }
        if (!WaitReady(io, absl::Seconds(5))) return false;
        continue;
      }
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads more bytes into the buffer; false on EOF, error or timeout.
  bool Fill(absl::Duration timeout) {
    char chunk[65536];
    if (session_ != nullptr) {
      const absl::Time deadline = absl::Now() + timeout;
      while (true) {
        size_t n = 0;
        const tls::Io io = session_->Read(chunk, sizeof(chunk), &n);
        if (io == tls::Io::kOk) {
          buffer_.append(chunk, n);
          return true;
        }
        if (io == tls::Io::kClosed || io == tls::Io::kFailed) {
          eof_ = true;
          return false;
        }
        if (!WaitReady(io, deadline - absl::Now())) return false;
      }
    }
    pollfd p{fd_, POLLIN, 0};
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout));
    if (::poll(&p, 1, static_cast<int>(ms)) <= 0) return false;
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      eof_ = true;  // closed or reset
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  // Waits until `text` has arrived (from the start of the unread bytes).
  bool WaitFor(absl::string_view text, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (buffer_.find(std::string(text)) == std::string::npos) {
      if (eof_ || !Fill(deadline - absl::Now())) return false;
    }
    return true;
  }

  // Whether the server closed the connection (EOF or reset) in time.
  bool WaitClosed(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!eof_) {
      if (!Fill(deadline - absl::Now())) return eof_;
    }
    return true;
  }

  // The next whole response, Content-Length or chunked.
  std::optional<RawResponse> Read(absl::Duration timeout = absl::Seconds(5)) {
    const absl::Time deadline = absl::Now() + timeout;
    if (!WaitFor("\r\n\r\n", timeout)) return std::nullopt;
    const size_t head_end = buffer_.find("\r\n\r\n");
    RawResponse r;
    std::vector<std::string> lines =
        absl::StrSplit(buffer_.substr(0, head_end), "\r\n");
    std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
    if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &r.status))
      return std::nullopt;
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    buffer_.erase(0, head_end + 4);
    if (r.headers.count("transfer-encoding") > 0) {
      while (true) {
        if (!WaitFor("\r\n", deadline - absl::Now())) return std::nullopt;
        const size_t eol = buffer_.find("\r\n");
        size_t size = 0;
        if (!absl::SimpleHexAtoi(buffer_.substr(0, eol), &size))
          return std::nullopt;
        while (buffer_.size() < eol + 2 + size + 2) {
          if (!Fill(deadline - absl::Now())) return std::nullopt;
        }
        r.body += buffer_.substr(eol + 2, size);
        buffer_.erase(0, eol + 2 + size + 2);
        if (size == 0) return r;
      }
    }
    size_t length = 0;
    if (r.headers.count("content-length") > 0) {
      absl::SimpleAtoi(r.headers["content-length"], &length);
    }
    while (buffer_.size() < length) {
      if (!Fill(deadline - absl::Now())) return std::nullopt;
    }
    r.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    return r;
  }

  std::string& buffer() { return buffer_; }

 private:
  // Polls for what the session asked; false at the timeout or on an error.
  bool WaitReady(tls::Io io, absl::Duration timeout) {
    if (io != tls::Io::kWantRead && io != tls::Io::kWantWrite) return false;
    pollfd p{fd_,
             static_cast<short>(io == tls::Io::kWantRead ? POLLIN : POLLOUT),
             0};
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout));
    return ::poll(&p, 1, static_cast<int>(ms)) > 0;
  }

  std::unique_ptr<tls::Session> session_;
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buffer_;
};

inline std::string Get(absl::string_view target, absl::string_view extra = "") {
  return absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: t\r\n", extra,
                      "\r\n");
}

inline std::string PostRequest(absl::string_view target,
                               absl::string_view body) {
  return absl::StrCat("POST ", target,
                      " HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
                      "Content-Length: ",
                      body.size(), "\r\n\r\n", body);
}

// An error body in the OpenAI shape, as engine/node_common.cc writes it.
inline void OpenAiError(const Request&, Response& res) {
  nlohmann::json j;
  j["error"]["message"] = absl::StrCat("status ", res.status);
  j["error"]["type"] = "invalid_request_error";
  j["error"]["param"] = nullptr;
  j["error"]["code"] = res.status;
  res.set_content(j.dump(), "application/json");
}

inline void ExpectOpenAiError(std::optional<RawResponse> r, int status) {
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, status);
  EXPECT_EQ(r->headers["content-type"], "application/json");
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->body;
  EXPECT_EQ(j["error"]["code"], status) << r->body;
  EXPECT_TRUE(j["error"]["param"].is_null()) << r->body;
  EXPECT_TRUE(j["error"]["type"].is_string()) << r->body;
}

// A server on 127.0.0.1, any port, with /hello, /echo and /stream routes;
// the stream is fed by the test.
class HttpServerTest : public ::testing::Test {
 protected:
  // `more_routes` adds routes of the test's own.
  void Serve(Options options = {},
             std::function<void(Server&)> more_routes = nullptr) {
    server_ = std::make_unique<Server>(options);
    server_->set_error_handler(OpenAiError);
    server_->set_default_headers({{"Server", "kvcanary-test"}});
    server_->Get("/hello", [](const Request& req, Response& res) {
      res.set_content(absl::StrCat("hello ", req.target), "text/plain");
    });
    server_->Post("/echo", [](const Request& req, Response& res) {
      res.set_header("X-Echo", req.get_header_value("x-ECHO"));
      res.set_header("X-Remote", req.remote_addr);
      res.set_content(req.body, "application/octet-stream");
    });
    server_->Get("/throw", [](const Request&, Response&) {
      throw std::runtime_error("boom");
    });
    server_->Get("/stream", [this](const Request&, Response& res) {
      res.set_chunked_content_provider(
          "text/event-stream",
          [this](size_t offset, DataSink& sink) { return Feed(offset, sink); },
          [this](bool success) {
            std::lock_guard<std::mutex> lock(mu_);
            released_ = true;
            release_success_ = success;
            changed_.notify_all();
          });
    });
    if (more_routes) more_routes(*server_);
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    server_->Start();
  }

  // The stream: "first\n" at once, then a line per Push(), then the end
  // at Finish(); records when a write first failed.
  bool Feed(size_t offset, DataSink& sink) {
    if (offset == 0 && !sink.write("first\n", 6)) return false;
    if (ticks_) {
      // A token every 10 ms inside one call, as a busy generator writes,
      // until a write fails (10 s at most).
      for (int i = 0; i < 1000; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (!sink.write("tick\n", 5)) return NoteFailed();
      }
      return false;
    }
    if (offset == 0) return true;
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, std::chrono::milliseconds(20),
                      [this] { return !pushed_.empty() || finish_; });
    if (!pushed_.empty()) {
      std::string line = pushed_;
      pushed_.clear();
      lock.unlock();
      if (!sink.write(line.data(), line.size())) return NoteFailed();
      return true;
    }
    if (finish_) {
      sink.done();
      return true;
    }
    return true;
  }
  bool NoteFailed() {
    std::lock_guard<std::mutex> lock(mu_);
    write_failed_at_ = absl::Now();
    changed_.notify_all();
    return false;
  }
  void Push(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    pushed_ += line;
    changed_.notify_all();
  }
  void Finish() {
    std::lock_guard<std::mutex> lock(mu_);
    finish_ = true;
    changed_.notify_all();
  }
  // Waits for the releaser; its `success`.
  std::optional<bool> WaitReleased(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!changed_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                           [this] { return released_; })) {
      return std::nullopt;
    }
    return release_success_;
  }

  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable changed_;
  std::string pushed_;
  bool finish_ = false;
  bool ticks_ = false;  // after "first": "tick" every 10 ms, in one call
  bool released_ = false;
  bool release_success_ = false;
  std::optional<absl::Time> write_failed_at_;
};

}  // namespace kvcanary::http::testing

#endif  // KVCANARY_TESTS_COMMON_HTTP_SERVER_FIXTURE_H_
