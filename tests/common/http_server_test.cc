// The HTTP server against raw sockets on loopback: what a plain client, a
// pipelining one, a streaming one and a hostile one see, over plain TCP and
// over mutual TLS.
#include "common/http_server.h"

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
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/tls_fixtures.h"

namespace kvcanary::http {
namespace {

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
  explicit RawClient(int port, const tls::Context* tls = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
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

std::string Get(absl::string_view target, absl::string_view extra = "") {
  return absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: t\r\n", extra,
                      "\r\n");
}

std::string PostRequest(absl::string_view target, absl::string_view body) {
  return absl::StrCat("POST ", target,
                      " HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\n"
                      "Content-Length: ",
                      body.size(), "\r\n\r\n", body);
}

// An error body in the OpenAI shape, as engine/node_common.cc writes it.
void OpenAiError(const Request&, Response& res) {
  nlohmann::json j;
  j["error"]["message"] = absl::StrCat("status ", res.status);
  j["error"]["type"] = "invalid_request_error";
  j["error"]["param"] = nullptr;
  j["error"]["code"] = res.status;
  res.set_content(j.dump(), "application/json");
}

void ExpectOpenAiError(std::optional<RawResponse> r, int status) {
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

TEST(StatusReasonTest, NamesKnownStatusesAndNothingElse) {
  EXPECT_EQ(StatusReason(100), "Continue");
  EXPECT_EQ(StatusReason(200), "OK");
  EXPECT_EQ(StatusReason(404), "Not Found");
  EXPECT_EQ(StatusReason(429), "Too Many Requests");
  EXPECT_EQ(StatusReason(505), "HTTP Version Not Supported");
  EXPECT_EQ(StatusReason(299), "");
  EXPECT_EQ(StatusReason(0), "");
  EXPECT_EQ(StatusReason(-1), "");
}

TEST_F(HttpServerTest, AnswersGetAndPost) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/hello?x=1")));
  auto hello = client.Read();
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->status, 200);
  EXPECT_EQ(hello->body, "hello /hello?x=1");
  EXPECT_EQ(hello->headers["content-type"], "text/plain");
  EXPECT_EQ(hello->headers["server"], "kvcanary-test");
  // Keep-alive: the same connection serves the next request.
  ASSERT_TRUE(client.Send(absl::StrCat(
      "POST /echo HTTP/1.1\r\nHost: t\r\nX-Echo: shout\r\nContent-Length: 4\r\n"
      "\r\nbody")));
  auto echo = client.Read();
  ASSERT_TRUE(echo.has_value());
  EXPECT_EQ(echo->status, 200);
  EXPECT_EQ(echo->body, "body");
  EXPECT_EQ(echo->headers["x-echo"], "shout");
  EXPECT_EQ(echo->headers["x-remote"], "127.0.0.1");
  EXPECT_EQ(echo->headers["content-length"], "4");
}

TEST_F(HttpServerTest, LayerErrorsCarryTheErrorHandlersBody) {
  Options options;
  options.max_body_bytes = 1 << 20;
  options.max_header_bytes = 16 << 10;
  Serve(options);
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(Get("/nowhere")));
    ExpectOpenAiError(client.Read(), 404);
    // A 404 keeps the connection.
    ASSERT_TRUE(client.Send(PostRequest("/hello", "x")));
    auto r = client.Read();
    ExpectOpenAiError(r, 405);
    EXPECT_EQ(r->headers["allow"], "GET, HEAD");
  }
  {
    // Refused from Content-Length, before any of the body is sent.
    RawClient client(port_);
    ASSERT_TRUE(client.Send(
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n"));
    auto r = client.Read();
    ExpectOpenAiError(r, 413);
    EXPECT_EQ(r->headers["connection"], "close");
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(
        Get("/hello",
            absl::StrCat("X-Big: ", std::string(20 << 10, 'a'), "\r\n"))));
    ExpectOpenAiError(client.Read(), 431);
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send("\x16\x03\x01 garbage\r\n\r\n"));
    ExpectOpenAiError(client.Read(), 400);
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(Get("/throw")));
    ExpectOpenAiError(client.Read(), 500);
  }
}

// A client that sends the whole body anyway still reads its 413: the
// server drains what comes after the answer instead of resetting.
TEST_F(HttpServerTest, ABodyOverTheLimitSentAnywayStillReadsIts413) {
  Options options;
  options.max_body_bytes = 1 << 20;
  Serve(options);
  RawClient client(port_);
  const std::string body(2 << 20, 'a');
  ASSERT_TRUE(client.Send(PostRequest("/echo", body)));
  ExpectOpenAiError(client.Read(), 413);
}

TEST_F(HttpServerTest, AHandlersBodylessErrorGetsTheErrorHandlersBody) {
  Serve({}, [](Server& server) {
    server.Get("/teapot",
               [](const Request&, Response& res) { res.status = 418; });
    server.Get("/own", [](const Request&, Response& res) {
      res.status = 429;
      res.set_content("slow down", "text/plain");
    });
  });
  RawClient client(port_);
  ASSERT_TRUE(client.Send(absl::StrCat(Get("/teapot"), Get("/own"))));
  ExpectOpenAiError(client.Read(), 418);
  auto own = client.Read();
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->status, 429);
  EXPECT_EQ(own->body, "slow down");
}

TEST_F(HttpServerTest, TheNotFoundHandlerServesUnknownPathsOnly) {
  Serve({}, [](Server& server) {
    server.set_not_found_handler([](const Request& req, Response& res) {
      res.set_content(absl::StrCat("fallback ", req.method, " ", req.path),
                      "text/plain");
    });
  });
  RawClient client(port_);
  ASSERT_TRUE(client.Send(absl::StrCat(Get("/elsewhere?q=1"),
                                       PostRequest("/other", "x"),
                                       PostRequest("/hello", "x"))));
  auto get = client.Read();
  auto post = client.Read();
  auto known = client.Read();
  ASSERT_TRUE(get.has_value() && post.has_value() && known.has_value());
  EXPECT_EQ(get->body, "fallback GET /elsewhere");
  EXPECT_EQ(post->body, "fallback POST /other");
  EXPECT_EQ(known->status, 405);  // a known path keeps its methods
}

TEST_F(HttpServerTest, HeadAnswersAGetRouteWithoutItsBody) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(
      absl::StrCat("HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n", Get("/hello"))));
  ASSERT_TRUE(client.WaitFor("\r\n\r\n", absl::Seconds(5)));
  const std::string head =
      client.buffer().substr(0, client.buffer().find("\r\n\r\n") + 4);
  client.buffer().erase(0, head.size());
  EXPECT_THAT(head, HasSubstr("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Length: 12\r\n"));
  auto get = client.Read();  // the GET right after: no body in between
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->body, "hello /hello");
}

TEST_F(HttpServerTest, AnswersPipelinedRequestsInOrder) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(absl::StrCat(
      Get("/hello?n=1"), PostRequest("/echo", "two"), Get("/hello?n=3"))));
  auto first = client.Read();
  auto second = client.Read();
  auto third = client.Read();
  ASSERT_TRUE(first.has_value() && second.has_value() && third.has_value());
  EXPECT_EQ(first->body, "hello /hello?n=1");
  EXPECT_EQ(second->body, "two");
  EXPECT_EQ(third->body, "hello /hello?n=3");
}

TEST_F(HttpServerTest, TwoIoThreadsServeManyPipeliningClientsAtOnce) {
  Options options;
  options.io_threads = 2;
  options.handler_threads = 8;
  Serve(options);
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([this, c, &answered] {
      RawClient client(port_);
      std::string requests;
      for (int i = 0; i < 10; ++i) {
        requests += PostRequest("/echo", absl::StrCat(c, ":", i));
      }
      if (!client.Send(requests)) return;
      for (int i = 0; i < 10; ++i) {
        auto r = client.Read();
        if (!r.has_value() || r->body != absl::StrCat(c, ":", i)) return;
        answered.fetch_add(1);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(answered.load(), 160);
}

TEST_F(HttpServerTest, StreamsEachChunkBeforeTheHandlerFinishes) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/stream")));
  ASSERT_TRUE(client.WaitFor("first\n", absl::Seconds(5))) << client.buffer();
  EXPECT_THAT(client.buffer(), HasSubstr("Transfer-Encoding: chunked\r\n"));
  EXPECT_THAT(client.buffer(), HasSubstr("Content-Type: text/event-stream"));
  Push("second\n");
  ASSERT_TRUE(client.WaitFor("second\n", absl::Seconds(5)));
  Finish();
  auto r = client.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "first\nsecond\n");
  EXPECT_EQ(WaitReleased(absl::Seconds(5)), std::optional<bool>(true));
  // The connection goes on after a streamed response.
  ASSERT_TRUE(client.Send(Get("/hello")));
  auto next = client.Read();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->status, 200);
}

TEST_F(HttpServerTest, AClientThatLeavesMidStreamFailsTheWrite) {
  ticks_ = true;
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/stream")));
  ASSERT_TRUE(client.WaitFor("first\n", absl::Seconds(5)));
  const absl::Time left = absl::Now();
  client.Close();
  EXPECT_EQ(WaitReleased(absl::Seconds(2)), std::optional<bool>(false));
  std::lock_guard<std::mutex> lock(mu_);
  ASSERT_TRUE(write_failed_at_.has_value());
  EXPECT_LT(*write_failed_at_ - left, absl::Seconds(1));
}

TEST_F(HttpServerTest, ASlowHeaderIsAnswered408WithinTheDeadline) {
  Options options;
  options.header_timeout = absl::Seconds(1);
  Serve(options);
  RawClient client(port_);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nX-Slow: "));
  // One byte every 200 ms: each read is quick, the whole is not.
  std::optional<RawResponse> r;
  for (int i = 0; i < 40 && !r.has_value(); ++i) {
    if (!client.Send("X")) break;  // closed
    r = client.Read(absl::Milliseconds(200));
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(2.5));
  ExpectOpenAiError(r, 408);
}

TEST_F(HttpServerTest, SlowlorisDoesNotStopOthersBeingServed) {
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < 2048) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 2048);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  Options options;
  options.handler_threads = 4;
  Serve(options);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 500; ++i) {
    slow.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(slow.back()->connected()) << i;
    ASSERT_TRUE(slow.back()->Send("GET /hello HTTP/1.1\r\nHost: t\r\n"));
  }
  const absl::Time start = absl::Now();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/hello")));
  auto r = client.Read(absl::Seconds(5));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(HttpServerTest, OverTheConnectionCapIs503) {
  Options options;
  options.max_connections = 4;
  Serve(options);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(held.back()->Send(Get("/hello")));
    auto r = held.back()->Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
  }
  RawClient fifth(port_);
  ASSERT_TRUE(fifth.Send(Get("/hello")));
  auto r = fifth.Read();
  ExpectOpenAiError(r, 503);
  EXPECT_TRUE(fifth.WaitClosed(absl::Seconds(5)));
  // A place freed is a place taken.
  held.pop_back();
  std::optional<RawResponse> later;
  for (int i = 0; i < 50; ++i) {
    RawClient again(port_);
    ASSERT_TRUE(again.Send(Get("/hello")));
    later = again.Read();
    if (later.has_value() && later->status == 200) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->status, 200);
}

TEST_F(HttpServerTest, ConnectionCloseAndHttp10EndTheConnection) {
  Serve();
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(Get("/hello", "Connection: close\r\n")));
    auto r = client.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->headers["connection"], "close");
    EXPECT_TRUE(client.WaitClosed(absl::Seconds(5)));
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send("GET /hello HTTP/1.0\r\n\r\n"));
    auto r = client.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(client.WaitClosed(absl::Seconds(5)));
  }
}

TEST_F(HttpServerTest, ExpectContinueGetsA100First) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                  "Content-Length: 5\r\n\r\n"));
  ASSERT_TRUE(
      client.WaitFor("HTTP/1.1 100 Continue\r\n\r\n", absl::Seconds(5)));
  client.buffer().clear();
  ASSERT_TRUE(client.Send("hello"));
  auto r = client.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "hello");
}

// As a fake target that "dies" after a request: the request is answered,
// idle connections are closed, new ones refused.
TEST_F(HttpServerTest, StopListeningFromAHandlerStillAnswersIt) {
  Serve({}, [](Server& server) {
    server.Get("/die", [&server](const Request&, Response& res) {
      server.StopListening();
      res.set_content("bye", "text/plain");
    });
  });
  RawClient idle(port_);
  ASSERT_TRUE(idle.Send(Get("/hello")));
  ASSERT_TRUE(idle.Read().has_value());
  RawClient dying(port_);
  ASSERT_TRUE(dying.Send(Get("/die")));
  auto r = dying.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "bye");
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_TRUE(dying.WaitClosed(absl::Seconds(5)));
  EXPECT_TRUE(idle.WaitClosed(absl::Seconds(5)));
  RawClient late(port_);
  EXPECT_FALSE(late.connected());
}

TEST_F(HttpServerTest, StopClosesIdleAndStreamingConnectionsAndJoins) {
  ticks_ = true;
  Serve();
  RawClient idle(port_);
  ASSERT_TRUE(idle.Send(Get("/hello")));
  ASSERT_TRUE(idle.Read().has_value());
  RawClient partial(port_);
  ASSERT_TRUE(partial.Send("GET /hel"));
  RawClient streaming(port_);
  ASSERT_TRUE(streaming.Send(Get("/stream")));
  ASSERT_TRUE(streaming.WaitFor("first\n", absl::Seconds(5)));
  auto stopped = std::async(std::launch::async, [this] { server_->Stop(); });
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  EXPECT_TRUE(idle.WaitClosed(absl::Seconds(1)));
  EXPECT_TRUE(partial.WaitClosed(absl::Seconds(1)));
  EXPECT_TRUE(streaming.WaitClosed(absl::Seconds(1)));
  EXPECT_EQ(WaitReleased(absl::Seconds(1)), std::optional<bool>(false));
  server_->Stop();  // again: nothing to do
  RawClient late(port_);
  EXPECT_FALSE(late.connected());
}

// --- Mutual TLS (Options::tls) ---------------------------------------------

class HttpServerTlsTest : public HttpServerTest {
 protected:
  void ServeTls(Options options = {}) {
    auto ctx = tls::Context::Load(deployment_.files);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = *ctx;
    options.tls = ctx_;
    Serve(options);
  }

  tls::testing::Deployment deployment_;
  std::shared_ptr<const tls::Context> ctx_;
};

TEST_F(HttpServerTlsTest, AnswersPipelinedRequestsInOrder) {
  ServeTls();
  RawClient client(port_, ctx_.get());
  ASSERT_TRUE(client.connected());
  // The second body spans several TLS records.
  const std::string big(100000, 'x');
  ASSERT_TRUE(client.Send(absl::StrCat(
      Get("/hello?n=1"), PostRequest("/echo", big), Get("/hello?n=3"))));
  auto first = client.Read();
  auto second = client.Read();
  auto third = client.Read();
  ASSERT_TRUE(first.has_value() && second.has_value() && third.has_value());
  EXPECT_EQ(first->body, "hello /hello?n=1");
  EXPECT_EQ(second->body, big);
  EXPECT_EQ(third->body, "hello /hello?n=3");
}

TEST_F(HttpServerTlsTest, KeepsTheConnectionForTheNextRequest) {
  ServeTls();
  RawClient client(port_, ctx_.get());
  ASSERT_TRUE(client.connected());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.Send(Get(absl::StrCat("/hello?i=", i))));
    auto r = client.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->body, absl::StrCat("hello /hello?i=", i));
    absl::SleepFor(absl::Milliseconds(20));  // idle between requests
  }
}

TEST_F(HttpServerTlsTest, StreamsEachChunkBeforeTheHandlerFinishes) {
  ServeTls();
  RawClient client(port_, ctx_.get());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send(Get("/stream")));
  ASSERT_TRUE(client.WaitFor("first\n", absl::Seconds(5))) << client.buffer();
  Push("second\n");
  ASSERT_TRUE(client.WaitFor("second\n", absl::Seconds(5)));
  Finish();
  auto r = client.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "first\nsecond\n");
  EXPECT_EQ(WaitReleased(absl::Seconds(5)), std::optional<bool>(true));
}

TEST_F(HttpServerTlsTest, AnswersLayerErrorsInsideTheSession) {
  Options options;
  options.max_body_bytes = 1000;
  ServeTls(options);
  RawClient client(port_, ctx_.get());
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send(PostRequest("/echo", std::string(5000, 'y'))));
  ExpectOpenAiError(client.Read(), 413);
}

TEST_F(HttpServerTlsTest, APlainClientGetsNoAnswer) {
  ServeTls();
  RawClient client(port_);
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.Send(Get("/hello")));
  EXPECT_TRUE(client.WaitClosed(absl::Seconds(5)));
  EXPECT_EQ(client.buffer().find("HTTP/1.1"), std::string::npos);
}

TEST_F(HttpServerTlsTest, AClientOfAnotherDeploymentGetsNoAnswer) {
  ServeTls();
  // Trusts the server's CA, presents a certificate of its own CA.
  tls::testing::Deployment other;
  const std::string both = other.dir + "/garbage.pem";
  {
    std::ofstream out(both);
    out << std::ifstream(deployment_.files.ca).rdbuf()
        << std::ifstream(other.files.ca).rdbuf();
  }
  auto ctx = tls::Context::Load({other.files.cert, other.files.key, both});
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  RawClient client(port_, ctx->get());
  // TLS 1.3 lets the client finish; the server's refusal ends the session.
  if (client.connected()) {
    client.Send(Get("/hello"));
    EXPECT_FALSE(client.Read(absl::Seconds(5)).has_value());
  }
  EXPECT_EQ(client.buffer().find("HTTP/1.1"), std::string::npos);
}

TEST_F(HttpServerTlsTest,
       AClientThatNeverHandshakesIsClosedAtTheHeaderDeadline) {
  Options options;
  options.header_timeout = absl::Milliseconds(200);
  ServeTls(options);
  RawClient client(port_);
  ASSERT_TRUE(client.connected());
  const absl::Time start = absl::Now();
  EXPECT_TRUE(client.WaitClosed(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

}  // namespace
}  // namespace kvcanary::http
