// One Target for every command (auditor/target/target.h): base URLs as the
// OpenAI SDKs take them, a scheme mismatch told within about a second, and
// every tenant's key checked before anything else, against real servers on
// loopback.
#include "auditor/target/target.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/check.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor {
namespace {

using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;

TEST(TargetUrlTest, TheApiAndTheServerRootWithOrWithoutV1) {
  for (const char* given :
       {"http://h:8000", "http://h:8000/", "http://h:8000/v1",
        "http://h:8000/v1/", " http://h:8000//v1// "}) {
    SCOPED_TRACE(given);
    absl::StatusOr<TargetUrl> u = ParseTargetUrl(given);
    ASSERT_TRUE(u.ok()) << u.status();
    EXPECT_EQ(u->root, "http://h:8000");
    EXPECT_EQ(u->Api("/completions"), "http://h:8000/v1/completions");
    EXPECT_EQ(u->Root("/props"), "http://h:8000/props");
    EXPECT_FALSE(u->https);
  }
  // Behind a gateway's path prefix: the engine's endpoints beside its /v1.
  absl::StatusOr<TargetUrl> g = ParseTargetUrl("https://gw.example/llm/v1");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->root, "https://gw.example/llm");
  EXPECT_TRUE(g->https);
  EXPECT_EQ(g->Root("/metrics"), "https://gw.example/llm/metrics");
  // "/v1" only as the last path segment.
  EXPECT_EQ(ParseTargetUrl("http://h/v10")->root, "http://h/v10");
}

TEST(TargetUrlTest, AnythingButAnHttpBaseUrlIsInvalid) {
  for (const char* given : {"", "h:8000", "ftp://h/", "http://", "http:///v1",
                            "http://h:8000/v1?x=1", "http://h/#top"}) {
    SCOPED_TRACE(given);
    EXPECT_EQ(ParseTargetUrl(given).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// https:// to a plain-HTTP port that answers the TLS ClientHello as a bad
// request at once (common/http_server.h does): curl's "wrong version
// number", then the plain GET, named.
TEST(TargetTest, HttpsToAPlainHttpPortIsAClearErrorWithinASecond) {
  http::Server server;
  server.Get("/", [](const http::Request&, http::Response& res) {
    res.set_content("plain", "text/plain");
  });
  auto port = server.Bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  server.Start();
  TargetOptions o;
  o.target = absl::StrCat("https://127.0.0.1:", *port, "/v1");
  o.tenants = {{"acme", "sk-a"}};
  Target target(o);
  const absl::Time start = absl::Now();
  const absl::Status s = target.Discover();
  const absl::Duration took = absl::Now() - start;
  server.Stop();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "answered in plain HTTP")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(),
                                absl::StrCat("use http://127.0.0.1:", *port)))
      << s;
  // kTlsHandshakeCheck (0.5 s) plus a loopback GET; generous for a busy
  // machine, far below the 10 s it took before.
  EXPECT_LT(took, absl::Seconds(3)) << took;
}

// A plain-HTTP server that waits for the rest of a request it cannot parse
// (the issue's case: "Connection timed out" after 10 s): it answers a
// plain GET and holds any other connection silently until closed.
class SilentOnTlsServer {
 public:
  SilentOnTlsServer() {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ==
          0);
    socklen_t size = sizeof(addr);
    CHECK(getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &size) ==
          0);
    port_ = ntohs(addr.sin_port);
    CHECK(listen(listener_, 8) == 0);
    thread_ = std::thread([this] { Serve(); });
  }
  ~SilentOnTlsServer() {
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
    for (int fd : held_) close(fd);
  }
  int port() const { return port_; }

 private:
  void Serve() {
    while (true) {
      const int fd = accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      char buf[512];
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n >= 4 && std::string(buf, 4) == "GET ") {
        const std::string ok =
            "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: "
            "close\r\n\r\n";
        (void)send(fd, ok.data(), ok.size(), MSG_NOSIGNAL);
        close(fd);
      } else {
        held_.push_back(fd);  // a ClientHello: wait for "the rest"
      }
    }
  }

  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::vector<int> held_;  // only the serving thread, until it joined
};

TEST(TargetTest, HttpsToAPlainHttpPortThatWaitsIsAnErrorWithinASecond) {
  SilentOnTlsServer server;
  TargetOptions o;
  o.target = absl::StrCat("https://127.0.0.1:", server.port());
  o.tenants = {{"acme", "sk-a"}};
  Target target(o);
  const absl::Time start = absl::Now();
  const absl::Status s = target.Discover();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "answered in plain HTTP")) << s;
  // kTlsHandshakeCheck (0.5 s) and a loopback GET: generous for a busy
  // machine, far below the 10 s it took before.
  EXPECT_GE(took, kTlsHandshakeCheck) << took;
  EXPECT_LT(took, absl::Seconds(3)) << took;
}

TEST(TargetTest, DiscoversThroughABaseUrlEndingInV1) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;  // its limit is in /props, at the root
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}};
  FakeTarget fake(fo);
  TargetOptions o;
  o.target = fake.url() + "/v1/";
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}};
  Target target(o);
  ASSERT_TRUE(target.Discover().ok());
  EXPECT_EQ(target.root(), fake.url());
  EXPECT_EQ(target.model(), "fake-model");
  EXPECT_EQ(target.advertised().source, "advertised");
  EXPECT_NE(target.advertised().where.find("/props"), std::string::npos);
  const Completion c = target.SendAlone(o.tenants[1], "Once upon a time", 2,
                                        /*stream=*/true);
  EXPECT_TRUE(c.usable) << c.error;
}

// Every key, the last of four included, before the command does anything:
// the error names the tenant.
TEST(TargetTest, AWrongKeyForTheLastOfFourTenantsIsNamed) {
  FakeTargetOptions fo;
  fo.api_keys = {{"sk-a", "acme"},
                 {"sk-g", "globex"},
                 {"sk-i", "initech"},
                 {"sk-u", "umbrella"}};
  FakeTarget fake(fo);
  TargetOptions o;
  o.target = fake.url();
  o.tenants = {{"acme", "sk-a"},
               {"globex", "sk-g"},
               {"initech", "sk-i"},
               {"umbrella", "sk-wrong"}};
  Target target(o);
  const absl::Status s = target.Discover();
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "'umbrella'")) << s;
}

// llama.cpp's slot reuses the longest common prefix with its previous
// prompt and reports it as cached: the BOS every prompt starts with, on
// every request. Measured once, it is no cache hit; a real repeat is.
TEST(TargetTest, ASharedHeadIsMeasuredOnceAndCountedUncached) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kLlamaCpp;
  fo.slot_prompt_reuse = true;
  FakeTarget fake(fo);
  TargetOptions o;
  o.target = fake.url();
  o.tenants = {{"acme", "sk-a"}};
  Target target(o);
  ASSERT_TRUE(target.Discover().ok());
  EXPECT_EQ(target.shared_head_tokens(), 1);  // the BOS
  const std::string prompt = "4242424242 Ticket. Once upon a time.";
  const Completion first = target.SendAlone(o.tenants[0], prompt, 1, false);
  ASSERT_TRUE(first.usable) << first.error;
  EXPECT_EQ(first.cached_tokens, 0);
  EXPECT_EQ(first.shared_head_tokens, 1);
  const Completion again = target.SendAlone(o.tenants[0], prompt, 1, true);
  ASSERT_TRUE(again.usable) << again.error;
  // All but the last token of the repeat, less the shared BOS.
  EXPECT_EQ(again.cached_tokens, again.prompt_tokens - 2);
}

// A target that reports no cached tokens costs no request to measure.
TEST(TargetTest, NoSharedHeadIsMeasuredWhereNoCachedTokensAreReported) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kTgi;
  FakeTarget fake(fo);
  TargetOptions o;
  o.target = fake.url();
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}};
  Target target(o);
  ASSERT_TRUE(target.Discover().ok());
  EXPECT_EQ(target.shared_head_tokens(), 0);
  // The two keys' checks (--api=auto's request is the first one's).
  EXPECT_EQ(fake.completions(), 2);
}

Target Discovered(const FakeTarget& fake, Api api = Api::kAuto) {
  TargetOptions o;
  o.target = fake.url();
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}};
  o.api = api;
  return Target(o);
}

// --api=auto: completions where the target answers an OpenAI text
// completion, chat where it has no /v1/completions route or answers it in a
// shape nobody documents; the reason is kept for the report.
TEST(TargetTest, AutoChoosesChatWhereCompletionsIsAbsentOrUnreadable) {
  using testing::CompletionsRoute;
  for (const auto& [route, api, reason] :
       std::vector<std::tuple<CompletionsRoute, Api, std::string>>{
           {CompletionsRoute::kOpenAi, Api::kCompletions, "OpenAI"},
           {CompletionsRoute::kAbsent, Api::kChat, "HTTP 404"},
           {CompletionsRoute::kUnknownShape, Api::kChat, "unknown shape"},
           {CompletionsRoute::kLlamaNative, Api::kCompletions, "llama.cpp"}}) {
    SCOPED_TRACE(reason);
    FakeTargetOptions fo;
    fo.flavor = Flavor::kLlamaCpp;
    fo.completions_route = route;
    FakeTarget fake(fo);
    Target target = Discovered(fake);
    ASSERT_TRUE(target.Discover().ok());
    EXPECT_EQ(target.api(), api);
    EXPECT_TRUE(absl::StrContains(target.api_reason(), reason))
        << target.api_reason();
    EXPECT_EQ(target.RequestLine(), api == Api::kChat
                                        ? "POST /v1/chat/completions"
                                        : "POST /v1/completions");
    for (const bool stream : {false, true}) {
      const Completion c = target.SendAlone(
          target.options().tenants[1], "Once upon a time there", 2, stream);
      ASSERT_TRUE(c.usable) << c.error;
      EXPECT_EQ(c.text, " time there");  // the fake's echo of the tail
      EXPECT_GT(c.prompt_tokens, 0);
    }
  }
}

// An API named on the command line is used as named: completions against a
// chat-only server is the start error it always was, naming the request.
TEST(TargetTest, AnApiNamedIsUsedAsNamed) {
  FakeTargetOptions fo;
  fo.completions_route = testing::CompletionsRoute::kAbsent;
  FakeTarget fake(fo);
  Target completions = Discovered(fake, Api::kCompletions);
  const absl::Status s = completions.Discover();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "HTTP 404")) << s;
  Target chat = Discovered(fake, Api::kChat);
  ASSERT_TRUE(chat.Discover().ok());
  EXPECT_EQ(chat.api_reason(), "--api=chat");
  EXPECT_EQ(ParseApi("chat").value(), Api::kChat);
  EXPECT_FALSE(ParseApi("responses").ok());
}

// One place builds the body for either API: chat sends one user message,
// log-probabilities as chat asks them, and never `echo` (vLLM's chat `echo`
// means something else).
TEST(TargetTest, AChatBodyCarriesMessagesAndChatLogprobsAndNoEcho) {
  FakeTargetOptions fo;
  fo.completions_route = testing::CompletionsRoute::kAbsent;
  FakeTarget fake(fo);
  Target target = Discovered(fake);
  ASSERT_TRUE(target.Discover().ok());
  const nlohmann::json body = nlohmann::json::parse(target.Body(
      "Say hi.", 3, /*stream=*/true, {{"logprobs", 5}, {"echo", true}}, "s1"));
  EXPECT_FALSE(body.contains("prompt"));
  EXPECT_FALSE(body.contains("echo"));
  EXPECT_EQ(body["messages"],
            nlohmann::json::parse(R"([{"role":"user","content":"Say hi."}])"));
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["top_logprobs"], 5);
  EXPECT_EQ(body["max_tokens"], 3);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["cache_salt"], "s1");
}

// A chat model that refuses max_tokens and temperature 0 (OpenAI's
// reasoning models) is sent max_completion_tokens and its own temperature,
// as its 400s ask.
TEST(TargetTest, ChatAdaptsToATargetRefusingMaxTokensAndTemperature) {
  FakeTargetOptions fo;
  fo.completions_route = testing::CompletionsRoute::kAbsent;
  fo.chat_like_reasoning_models = true;
  FakeTarget fake(fo);
  Target target = Discovered(fake);
  ASSERT_TRUE(target.Discover().ok());
  EXPECT_EQ(target.api(), Api::kChat);
  EXPECT_TRUE(absl::StrContains(target.api_reason(), "max_completion_tokens"))
      << target.api_reason();
  const nlohmann::json body =
      nlohmann::json::parse(target.Body("Say hi.", 3, false));
  EXPECT_EQ(body["max_completion_tokens"], 3);
  EXPECT_FALSE(body.contains("max_tokens"));
  EXPECT_FALSE(body.contains("temperature"));
  const Completion c =
      target.SendAlone(target.options().tenants[0], "Say hi now", 2, true);
  EXPECT_TRUE(c.usable) << c.error;
}

TEST(TargetTest, TenantsUsedSaysWhichAndAsWhat) {
  const std::vector<AuditTenant> all = {
      {"acme", "a"}, {"globex", "g"}, {"initech", "i"}, {"umbrella", "u"}};
  EXPECT_EQ(TenantsUsedText(all, {{0, "A"}, {1, "B"}}),
            "4 keys checked; used: acme (A), globex (B); not used: initech, "
            "umbrella");
  EXPECT_EQ(TenantsUsedText({{"acme", "a"}}, {{0, "sweeps"}}),
            "1 key checked; used: acme (sweeps)");
}

}  // namespace
}  // namespace kvcanary::auditor
