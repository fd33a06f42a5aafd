// The tenants file the auditor acts as: two tenants at least, each with a
// key, none sharing a name or a key.
#include "auditor/target/tenants.h"

#include <unistd.h>

#include <fstream>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

std::string File(const std::string& contents) {
  static int counter = 0;
  const std::string path = ::testing::TempDir() + "/kvcanary-audit-tenants-" +
                           std::to_string(getpid()) + "-" +
                           std::to_string(counter++) + ".json";
  std::ofstream(path) << contents;
  return path;
}

TEST(AuditTenantsTest, ReadsBothFormats) {
  auto t = LoadAuditTenants(File(R"({"tenants": [
      {"id": "acme", "api_key": "sk-a"},
      {"id": "globex", "api_keys": ["sk-g", "sk-g2"]}]})"));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[1].name, "globex");
  EXPECT_EQ((*t)[1].api_key, "sk-g");
}

TEST(AuditTenantsTest, ATenantListedTwiceIsRefusedByName) {
  auto t = LoadAuditTenants(File(R"({"tenants": [
      {"id": "acme", "api_key": "sk-a"},
      {"id": "acme", "api_key": "sk-b"}]})"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("'acme' is listed twice"),
            std::string::npos)
      << t.status();
}

TEST(AuditTenantsTest, TwoTenantsWithOneKeyAreRefused) {
  auto t = LoadAuditTenants(File(R"({"tenants": [
      {"id": "acme", "api_key": "sk-same"},
      {"id": "globex", "api_key": "sk-same"}]})"));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("same api_key"), std::string::npos);
}

TEST(AuditTenantsTest, OneTenantOrAMissingKeyIsRefused) {
  EXPECT_FALSE(
      LoadAuditTenants(File(R"({"tenants": [{"id": "acme", "api_key": "k"}]})"))
          .ok());
  EXPECT_FALSE(LoadAuditTenants(File(R"({"tenants": [{"id": "acme"},
      {"id": "globex", "api_key": "k"}]})"))
                   .ok());
  EXPECT_FALSE(LoadAuditTenants(File("not json")).ok());
  EXPECT_FALSE(LoadAuditTenants("/nonexistent/tenants.json").ok());
}

}  // namespace
}  // namespace kvcanary::auditor
