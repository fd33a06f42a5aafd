// Requests shaped to get past the router's admission against
// `kvcanary-engine up`: `n` choices more than the tenant may ever have in
// flight (a 400 naming the limit, never a 429 a client retries for ever),
// and a cache_salt holding a C1 control character (a 400, as C0 ones are).
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr char kLimitedTenants[] = R"({"tenants": [
    {"id": "acme", "api_keys": ["sk-acme"], "max_concurrent_requests": 4},
    {"id": "globex", "api_keys": ["sk-globex"]}]})";

class AdmissionLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster({}, kLimitedTenants); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ok()); }

  static HttpResult Complete(const nlohmann::json& extra,
                             const std::string& key) {
    nlohmann::json body = nlohmann::json::parse(Completion("Once upon", 2));
    body.update(extra);
    return Post(cluster_->router(), "/v1/completions", body.dump(), key);
  }

  static Cluster* cluster_;
};
Cluster* AdmissionLimitsTest::cluster_ = nullptr;

TEST_F(AdmissionLimitsTest, MoreChoicesThanTheTenantMayHaveInFlightIsA400) {
  const HttpResult r = Complete({{"n", 5}}, "sk-acme");
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["type"], "invalid_request_error") << r.body;
  EXPECT_EQ(r.json["error"]["param"], "n") << r.body;
  const std::string message = r.json["error"]["message"];
  EXPECT_NE(message.find("at most 4 requests in flight"), std::string::npos)
      << message;
  // As many as the limit is served.
  const HttpResult fits = Complete({{"n", 4}}, "sk-acme");
  ASSERT_EQ(fits.status, 200) << fits.body;
  EXPECT_EQ(fits.json["choices"].size(), 4u);
}

TEST_F(AdmissionLimitsTest, ACacheSaltWithAC1ControlCharacterIsA400) {
  for (const char* salt : {"nel\u0085salt", "\u0080", "csi\u009b"}) {
    const HttpResult r = Complete({{"cache_salt", salt}}, "sk-acme");
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json["error"]["param"], "cache_salt") << r.body;
  }
  // U+00A0 is not a control character.
  EXPECT_EQ(Complete({{"cache_salt", "nbsp\u00a0salt"}}, "sk-acme").status,
            200);
}

}  // namespace
}  // namespace kvcanary::testing
