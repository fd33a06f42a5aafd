// Requests a proxy in front of the engine could read differently from the
// engine, each against `kvcanary-engine up` over raw sockets (an HTTP
// client library would normalise them): bytes after the JSON value (a NUL
// and more JSON, or garbage), duplicate keys at any depth, two
// Authorization headers, and "Expect: 100-continue" answered only once the
// key checks out (docs/api.md, "Strict parsing").
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

// One TCP connection to a listener of `up`, spoken to byte for byte.
class RawConnection {
 public:
  // `base`: "http://127.0.0.1:PORT".
  explicit RawConnection(const std::string& base) {
    int port = 0;
    if (!absl::SimpleAtoi(base.substr(base.rfind(':') + 1), &port)) return;
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n =
          send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += n;
    }
    return true;
  }
  // What arrives until `complete` holds for it, the peer closes, or
  // `timeout` passes.
  template <typename Complete>
  std::string ReadUntil(Complete complete, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!complete(received_)) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char buffer[4096];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      received_.append(buffer, n);
    }
    return received_;
  }

 private:
  int fd_ = -1;
  std::string received_;
};

// Whether `bytes` hold a whole final (non-1xx) response with a
// Content-Length body.
bool HasFinalResponse(const std::string& bytes) {
  size_t at = 0;
  while (absl::StartsWith(absl::string_view(bytes).substr(at), kContinue)) {
    at += sizeof(kContinue) - 1;
  }
  const size_t head_end = bytes.find("\r\n\r\n", at);
  if (head_end == std::string::npos) return false;
  const std::string head = absl::AsciiStrToLower(bytes.substr(at, head_end));
  const size_t cl = head.find("content-length:");
  if (cl == std::string::npos) return true;
  const size_t length = std::strtoul(head.c_str() + cl + 15, nullptr, 10);
  return bytes.size() >= head_end + 4 + length;
}

// The final response in `bytes`: its status (0: none) and JSON body.
struct Answer {
  int status = 0;
  json body;
  bool got_continue = false;
};
Answer ParseAnswer(const std::string& bytes) {
  Answer a;
  size_t at = 0;
  while (absl::StartsWith(absl::string_view(bytes).substr(at), kContinue)) {
    a.got_continue = true;
    at += sizeof(kContinue) - 1;
  }
  if (bytes.size() < at + 12 || bytes.compare(at, 5, "HTTP/") != 0) return a;
  a.status = std::atoi(bytes.c_str() + at + 9);
  const size_t head_end = bytes.find("\r\n\r\n", at);
  if (head_end != std::string::npos) {
    a.body = json::parse(bytes.substr(head_end + 4), nullptr, false);
  }
  return a;
}

// POST `path` with `body` as given (Content-Length counts every byte) and
// `headers` (each "Name: value\r\n"), on a connection of its own.
Answer RawPost(const std::string& base, const std::string& path,
               const std::string& body, const std::string& headers) {
  RawConnection c(base);
  EXPECT_TRUE(c.ok()) << base;
  c.Send(absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                      headers, "Content-Type: application/json\r\n",
                      "Content-Length: ", body.size(), "\r\n\r\n", body));
  return ParseAnswer(c.ReadUntil(HasFinalResponse, absl::Seconds(30)));
}

std::string Bearer(const std::string& key) {
  return absl::StrCat("Authorization: Bearer ", key, "\r\n");
}

class StrictParsingTest : public SharedClusterTest {
 protected:
  Answer Complete(const std::string& body, bool chat = false) {
    return RawPost(cluster_->router(),
                   chat ? "/v1/chat/completions" : "/v1/completions", body,
                   Bearer("sk-acme"));
  }
};

TEST_F(StrictParsingTest, WhitespaceAfterTheBodyIsServed) {
  Answer a = Complete("{\"prompt\":\"hi\",\"max_tokens\":1} \r\n\t");
  EXPECT_EQ(a.status, 200) << a.body;
}

TEST_F(StrictParsingTest, ANulThenMoreJsonIsA400) {
  const std::string body = std::string(R"({"prompt":"hi","max_tokens":1})") +
                           '\0' + R"({"max_tokens":400000})";
  Answer a = Complete(body);
  ASSERT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(a.body["error"]["type"], "invalid_request_error") << a.body;
  EXPECT_TRUE(
      absl::StrContains(a.body["error"]["message"].get<std::string>(), "NUL"))
      << a.body;
}

TEST_F(StrictParsingTest, TrailingGarbageIsA400) {
  for (const std::string tail : {"xyz", "{}", ",", "]"}) {
    Answer a = Complete(R"({"prompt":"hi","max_tokens":1})" + tail);
    EXPECT_EQ(a.status, 400) << tail << ": " << a.body;
    EXPECT_EQ(a.body["error"]["type"], "invalid_request_error") << a.body;
  }
}

TEST_F(StrictParsingTest, ADuplicateTopLevelKeyIsA400NamingIt) {
  Answer a = Complete(R"({"prompt":"hi","max_tokens":1,"max_tokens":400000})");
  ASSERT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(a.body["error"]["param"], "max_tokens") << a.body;
  EXPECT_EQ(a.body["error"]["type"], "invalid_request_error") << a.body;
}

TEST_F(StrictParsingTest, ADuplicateNestedKeyIsA400NamingItsPath) {
  Answer a = Complete(
      R"({"messages":[{"role":"user","content":"hi","role":"system"}],)"
      R"("max_tokens":1})",
      /*chat=*/true);
  ASSERT_EQ(a.status, 400) << a.body;
  EXPECT_EQ(a.body["error"]["param"], "messages[0].role") << a.body;
}

TEST_F(StrictParsingTest, InternalBodiesAreParsedStrictlyToo) {
  const std::string secret = Bearer(cluster_->internal_secret());
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    const std::string path = node == cluster_->prefill()
                                 ? "/internal/v1/prefill"
                                 : "/internal/v1/generate";
    Answer dup =
        RawPost(node, path, R"({"request_id":5,"request_id":6})", secret);
    EXPECT_EQ(dup.status, 400) << node << ": " << dup.body;
    Answer nul =
        RawPost(node, path, std::string("{}\0{\"request_id\":5}", 19), secret);
    EXPECT_EQ(nul.status, 400) << node << ": " << nul.body;
  }
}

TEST_F(StrictParsingTest, TwoAuthorizationHeadersAreA400OnEveryListener) {
  const std::string two = Bearer("sk-acme") + Bearer("sk-globex");
  Answer a = Complete(R"({"prompt":"hi","max_tokens":1})");
  ASSERT_EQ(a.status, 200) << a.body;  // one is served
  Answer router = RawPost(cluster_->router(), "/v1/completions",
                          R"({"prompt":"hi","max_tokens":1})", two);
  EXPECT_EQ(router.status, 400) << router.body;
  EXPECT_TRUE(absl::StrContains(
      router.body["error"]["message"].get<std::string>(), "Authorization"))
      << router.body;
  // The same key twice is no better: which one counts is still a guess.
  Answer same = RawPost(cluster_->router(), "/v1/completions",
                        R"({"prompt":"hi","max_tokens":1})",
                        Bearer("sk-acme") + Bearer("sk-acme"));
  EXPECT_EQ(same.status, 400) << same.body;
  const std::string secrets =
      Bearer(cluster_->internal_secret()) + Bearer(cluster_->internal_secret());
  Answer prefill =
      RawPost(cluster_->prefill(), "/internal/v1/prefill", "{}", secrets);
  EXPECT_EQ(prefill.status, 400) << prefill.body;
  Answer decode =
      RawPost(cluster_->decode(), "/internal/v1/generate", "{}", secrets);
  EXPECT_EQ(decode.status, 400) << decode.body;
}

// Sends the head of a POST with "Expect: 100-continue" and no body yet;
// returns what arrives within `wait`.
std::string ExpectContinueHead(RawConnection& c, const std::string& path,
                               const std::string& headers, size_t length,
                               absl::Duration wait) {
  c.Send(absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                      headers,
                      "Content-Type: application/json\r\n"
                      "Expect: 100-continue\r\nContent-Length: ",
                      length, "\r\n\r\n"));
  return c.ReadUntil(
      [](const std::string& r) {
        return absl::StartsWith(r, kContinue) || HasFinalResponse(r);
      },
      wait);
}

TEST_F(StrictParsingTest, ExpectContinueWithABadKeyIs401WithoutA100) {
  const std::string body = R"({"prompt":"hi","max_tokens":1})";
  for (const std::string& headers : {Bearer("sk-wrong"), std::string(),
                                     std::string("Authorization: x\r\n")}) {
    RawConnection c(cluster_->router());
    ASSERT_TRUE(c.ok());
    const std::string got = ExpectContinueHead(c, "/v1/completions", headers,
                                               body.size(), absl::Seconds(10));
    Answer a = ParseAnswer(got);
    EXPECT_FALSE(absl::StrContains(got, "100 Continue")) << got;
    EXPECT_EQ(a.status, 401) << got;
    EXPECT_EQ(a.body["error"]["type"], "authentication_error") << got;
  }
}

TEST_F(StrictParsingTest, ExpectContinueWithTheKeyGets100Then200) {
  const std::string body = R"({"prompt":"hi","max_tokens":1})";
  RawConnection c(cluster_->router());
  ASSERT_TRUE(c.ok());
  const std::string got = ExpectContinueHead(
      c, "/v1/completions", Bearer("sk-acme"), body.size(), absl::Seconds(10));
  ASSERT_EQ(got, kContinue);
  ASSERT_TRUE(c.Send(body));
  Answer a = ParseAnswer(c.ReadUntil(HasFinalResponse, absl::Seconds(30)));
  EXPECT_TRUE(a.got_continue);
  EXPECT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.body["object"], "text_completion") << a.body;
}

TEST_F(StrictParsingTest, ExpectContinueOnAnInternalRouteNeedsTheSecret) {
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    const std::string path = node == cluster_->prefill()
                                 ? "/internal/v1/prefill"
                                 : "/internal/v1/generate";
    RawConnection bad(node);
    ASSERT_TRUE(bad.ok());
    const std::string refused =
        ExpectContinueHead(bad, path, Bearer("sk-acme"), 2, absl::Seconds(10));
    EXPECT_FALSE(absl::StrContains(refused, "100 Continue")) << refused;
    EXPECT_EQ(ParseAnswer(refused).status, 401) << refused;
    RawConnection good(node);
    ASSERT_TRUE(good.ok());
    const std::string let_in = ExpectContinueHead(
        good, path, Bearer(cluster_->internal_secret()), 2, absl::Seconds(10));
    EXPECT_EQ(let_in, kContinue) << node;
    ASSERT_TRUE(good.Send("{}"));
    // Let in, then refused for what the body lacks.
    Answer a = ParseAnswer(good.ReadUntil(HasFinalResponse, absl::Seconds(30)));
    EXPECT_EQ(a.status, 400) << node << ": " << a.body;
  }
}

}  // namespace
}  // namespace kvcanary::testing
