// One Target for every command (auditor/target/target.h): base URLs as the
// OpenAI SDKs take them, a scheme mismatch told within about a second, and
// every tenant's key checked before anything else, against real servers on
// loopback.
#include "auditor/target/target.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
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

// https:// to a plain-HTTP port: a server that reads the TLS ClientHello
// as the start of a request waits for the rest (here 10 s, its header
// timeout). The error names the scheme, well within its own bound.
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
