#include "auditor/target/http_client.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "auditor/target/multi_client.h"
#include "common/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

using ::testing::HasSubstr;

// A real HTTP server on 127.0.0.1, an OS-chosen port, serving from its own
// thread for the lifetime of the fixture.
class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Post("/echo", [](const http::Request& req, http::Response& res) {
      res.set_content(
          absl::StrCat(req.get_header_value("X-Tenant"), "|", req.body),
          "text/plain");
    });
    server_.Get("/missing", [](const http::Request&, http::Response& res) {
      res.status = 404;
      res.set_content("no such thing", "text/plain");
    });
    server_.Get("/big", [](const http::Request&, http::Response& res) {
      res.set_content(std::string(100000, 'x'), "text/plain");
    });
    server_.Get("/slow", [this](const http::Request&, http::Response& res) {
      // Far longer than any test timeout, but ends as soon as the
      // fixture shuts down so that stopping the server does not
      // wait.
      for (int i = 0; i < 500 && !stopping_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      res.set_content("late", "text/plain");
    });
    // A first chunk at once, then nothing until the fixture stops.
    server_.Get("/trickle", [this](const http::Request&, http::Response& res) {
      res.set_chunked_content_provider(
          "text/event-stream", [this](size_t offset, http::DataSink& sink) {
            if (offset == 0) return sink.write("data: 1\n\n", 9);
            for (int i = 0; i < 500 && !stopping_; ++i) {
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            sink.done();
            return true;
          });
    });
    auto port = server_.Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    server_.Start();
  }

  // One request through a MultiClient.
  auditor::ProbeResponse Multi(auditor::ProbeRequest r) {
    auditor::ProbeResponse out;
    bool sent = false, got = false;
    auditor::MultiClient client(1);
    client.Run(
        [&]() -> std::optional<auditor::ProbeRequest> {
          if (sent) return std::nullopt;
          sent = true;
          return r;
        },
        [&](auditor::ProbeResponse resp) {
          out = std::move(resp);
          got = true;
        },
        [&] { return got; });
    return out;
  }

  void TearDown() override {
    stopping_ = true;
    server_.Stop();
  }

  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }

  http::Server server_;
  std::atomic<bool> stopping_{false};
  int port_ = 0;
};

// A loopback port with nobody listening: bind one, note it, close it.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t size = sizeof(addr);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST_F(HttpClientTest, PostSendsBodyAndHeadersAndReturnsResponse) {
  HttpClient client;
  const std::string body("{\"prompt\":\"hi\"}\0tail", 20);
  auto response =
      client.Post(Url("/echo"), body,
                  {"Content-Type: application/json", "X-Tenant: tenant-a"},
                  absl::Seconds(5));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "tenant-a|" + body);
  EXPECT_GT(response->elapsed, absl::ZeroDuration());
}

TEST_F(HttpClientTest, PostWithEmptyBody) {
  auto response =
      HttpClient().Post(Url("/echo"), "", {"X-Tenant: t"}, absl::Seconds(5));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "t|");
}

TEST_F(HttpClientTest, HttpErrorStatusIsAResponseNotAnError) {
  auto response = HttpClient().Get(Url("/missing"), {}, absl::Seconds(5));
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->body, "no such thing");
}

TEST_F(HttpClientTest, SlowServerIsDeadlineExceeded) {
  const absl::Time start = absl::Now();
  auto response = HttpClient().Get(Url("/slow"), {}, absl::Milliseconds(200));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded)
      << response.status();
  EXPECT_THAT(response.status().message(), HasSubstr(Url("/slow")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST_F(HttpClientTest, BodyOverLimitIsResourceExhausted) {
  HttpClientOptions options;
  options.max_response_bytes = 1000;
  auto response = HttpClient(options).Get(Url("/big"), {}, absl::Seconds(5));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted)
      << response.status();
}

TEST_F(HttpClientTest, HeaderWithLineBreakIsRejectedBeforeSending) {
  auto response = HttpClient().Post(
      Url("/echo"), "x", {"X-Tenant: a\r\nX-Injected: b"}, absl::Seconds(5));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  response =
      HttpClient().Post(Url("/echo"), "x", {"no colon"}, absl::Seconds(5));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HttpClientTest, NonPositiveTimeoutIsInvalidArgument) {
  EXPECT_EQ(HttpClient()
                .Get(Url("/missing"), {}, absl::ZeroDuration())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpClient()
                .Get(Url("/missing"), {}, absl::InfiniteDuration())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// The campaign's hang-ups: the client gives up on purpose, at a time or at
// the first byte of a 200, and says so; an error answer is read whole.
TEST_F(HttpClientTest, AMultiClientHangsUpWhenAskedAndSaysSo) {
  auditor::ProbeRequest timed;
  timed.url = Url("/slow");
  timed.hang_up_after = absl::Milliseconds(100);
  const auditor::ProbeResponse a = Multi(timed);
  EXPECT_TRUE(a.hung_up);
  EXPECT_TRUE(absl::IsCancelled(a.transport)) << a.transport;
  EXPECT_LT(a.total, absl::Seconds(2));

  auditor::ProbeRequest first_byte;
  first_byte.url = Url("/trickle");
  first_byte.hang_up_at_first_byte = true;
  const auditor::ProbeResponse b = Multi(first_byte);
  EXPECT_TRUE(b.hung_up);
  EXPECT_LT(b.total, absl::Seconds(2));

  auditor::ProbeRequest error;
  error.url = Url("/missing");
  error.hang_up_at_first_byte = true;
  const auditor::ProbeResponse c = Multi(error);
  EXPECT_FALSE(c.hung_up);
  EXPECT_EQ(c.status, 404);
  EXPECT_EQ(c.body, "no such thing");

  auditor::ProbeRequest slow;  // a real timeout is no hang-up
  slow.url = Url("/slow");
  slow.timeout = absl::Milliseconds(100);
  const auditor::ProbeResponse d = Multi(slow);
  EXPECT_FALSE(d.hung_up);
  EXPECT_FALSE(d.transport.ok());
}

TEST(HttpClientNoServerTest, ClosedPortIsUnavailableNamingTheUrl) {
  const std::string url =
      absl::StrCat("http://127.0.0.1:", ClosedPort(), "/v1/completions");
  auto response = HttpClient().Post(url, "{}", {}, absl::Seconds(5));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kUnavailable)
      << response.status();
  EXPECT_THAT(response.status().message(), HasSubstr(url));
}

TEST(HttpClientNoServerTest, OnlyHttpAndHttpsAreAllowed) {
  auto response = HttpClient().Get("file:///etc/passwd", {}, absl::Seconds(1));
  ASSERT_FALSE(response.ok());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument)
      << response.status();
}

TEST(StatusFromCurlTest, MapsCodes) {
  EXPECT_EQ(StatusFromCurl(CURLE_COULDNT_RESOLVE_HOST, "u", "").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromCurl(CURLE_COULDNT_CONNECT, "u", "").code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusFromCurl(CURLE_OPERATION_TIMEDOUT, "u", "").code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StatusFromCurl(CURLE_SSL_CONNECT_ERROR, "u", "").code(),
            absl::StatusCode::kInternal);
  EXPECT_THAT(
      StatusFromCurl(CURLE_COULDNT_CONNECT, "http://x/", "detail").message(),
      HasSubstr("http://x/"));
}

}  // namespace
}  // namespace kvcanary
