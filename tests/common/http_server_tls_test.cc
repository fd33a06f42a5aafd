// The HTTP server over mutual TLS (Options::tls): the same client behaviour
// inside a session, and nothing at all for a peer without the CA's
// certificate.
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/http_server_fixture.h"
#include "tests/common/tls_fixtures.h"

namespace kvcanary::http {
namespace {

using testing::ExpectOpenAiError;
using testing::Get;
using ::testing::HasSubstr;
using testing::HttpServerTest;
using testing::PostRequest;
using testing::RawClient;

using testing::RawResponse;

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
