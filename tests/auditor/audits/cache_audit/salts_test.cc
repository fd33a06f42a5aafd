#include "auditor/audits/cache_audit/salts.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

AuditTenant Tenant(std::string name, std::string salt, bool gateway = false) {
  AuditTenant t;
  t.name = name;
  t.api_key = "sk-" + name;
  t.cache_salt = std::move(salt);
  t.gateway = gateway;
  return t;
}

std::vector<AuditTenant> Tenants() {
  return {Tenant("edge", "", /*gateway=*/true), Tenant("acme", "a-salt"),
          Tenant("globex", "g-salt")};
}

TEST(SaltPairsTest, PairsUseTheFirstTwoTenantsThatAreNotGateways) {
  std::vector<std::string> notes;
  const auto pairs = MakeSaltPairs(Tenants(), {}, &notes);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  ASSERT_EQ(pairs->size(), 3u);
  const SaltPair& tenants = (*pairs)[0];
  EXPECT_EQ(tenants.check, "salt_tenants");
  EXPECT_EQ(tenants.writer.name, "acme");
  EXPECT_EQ(tenants.writer.body_salt, "a-salt");
  EXPECT_EQ(tenants.reader.name, "globex");
  EXPECT_EQ(tenants.reader.body_salt, "g-salt");
  const SaltPair& salts = (*pairs)[1];
  EXPECT_EQ(salts.reader.name, "acme");
  EXPECT_EQ(salts.reader.body_salt, "a-salt-2");
  const SaltPair& forged = (*pairs)[2];
  EXPECT_EQ(forged.check, "salt_forged");
  EXPECT_EQ(forged.reader.name, "globex");
  EXPECT_EQ(forged.reader.body_salt, "a-salt");
  EXPECT_EQ(forged.finding_kind, "salt_forgeable");
  EXPECT_EQ(forged.severity, Severity::kCritical);
  EXPECT_TRUE(notes.empty());
}

TEST(SaltPairsTest, GatewayPairSendsTheHeaderWithTheGatewaysKey) {
  std::vector<std::string> notes;
  const auto pairs = MakeSaltPairs(Tenants(), {"x-tenant", "edge"}, &notes);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  ASSERT_EQ(pairs->size(), 4u);
  const SaltPair& gw = pairs->back();
  EXPECT_EQ(gw.check, "salt_gateway");
  EXPECT_EQ(gw.writer.api_key, "sk-edge");
  EXPECT_EQ(gw.writer.extra_header, "x-tenant: globex");
  EXPECT_EQ(gw.writer.body_salt, "g-salt");
  EXPECT_EQ(gw.reader.extra_header, "x-tenant: acme");
  EXPECT_EQ(gw.reader.body_salt, "g-salt");
  EXPECT_EQ(gw.finding_kind, "gateway_salt_override");
}

TEST(SaltPairsTest, MissingSaltsAreMadeUpWithANote) {
  std::vector<std::string> notes;
  const auto pairs = MakeSaltPairs(
      {Tenant("acme", ""), Tenant("globex", "g-salt")}, {}, &notes);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ((*pairs)[0].writer.body_salt, "kvcanary-salt-acme");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("acme"), std::string::npos);
}

TEST(SaltPairsTest, RefusesBadGatewayFlagsAndTooFewTenants) {
  std::vector<std::string> notes;
  EXPECT_FALSE(MakeSaltPairs(Tenants(), {"x-tenant", ""}, &notes).ok());
  EXPECT_FALSE(MakeSaltPairs(Tenants(), {"x-tenant", "acme"}, &notes).ok());
  EXPECT_FALSE(MakeSaltPairs(Tenants(), {"x-tenant", "nobody"}, &notes).ok());
  EXPECT_FALSE(
      MakeSaltPairs({Tenant("edge", "", true), Tenant("acme", "a")}, {}, &notes)
          .ok());
  EXPECT_FALSE(MakeSaltPairs({Tenant("acme", "same"), Tenant("globex", "same")},
                             {}, &notes)
                   .ok());
}

}  // namespace
}  // namespace kvcanary::auditor
