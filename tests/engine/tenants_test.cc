#include "engine/nodes/tenants.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/temp_dir.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

constexpr char kAcmeKey[] = "sk-acme-0123456789";
constexpr char kAcmeKey2[] = "sk-acme-second";
constexpr char kGlobexKey[] = "sk-globex-abcdef";

const std::string kFile = absl::StrCat(R"({"tenants": [
  {"id": "acme", "api_keys": [")",
                                       kAcmeKey, R"(", ")", kAcmeKey2,
                                       R"("], "max_concurrent_requests": 16},
  {"id": "globex", "api_keys": [")",
                                       kGlobexKey, R"("]}
]})");

// A file in a fresh directory under $TMPDIR, removed at the end of the
// test.
class TempFile {
 public:
  explicit TempFile(const std::string& contents)
      : dir_(TempDir::Create("kvcanary-tenants").value()),
        path_(dir_.File("tenants.json")) {
    std::ofstream(path_) << contents;
  }
  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  std::string path_;
};

TenantRegistry Registry() {
  auto registry = TenantRegistry::Parse(kFile, "tenants.json");
  EXPECT_TRUE(registry.ok()) << registry.status();
  return *std::move(registry);
}

// Parses `json` expecting kInvalidArgument; returns the message.
std::string ParseError(const std::string& json) {
  auto registry = TenantRegistry::Parse(json, "t.json");
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument)
      << json;
  const std::string message(registry.status().message());
  EXPECT_TRUE(absl::StartsWith(message, "t.json: ")) << message;
  return message;
}

TEST(TenantRegistryTest, LoadsFromFileWithIdsInFileOrder) {
  TempFile file(kFile);
  auto registry = TenantRegistry::LoadFile(file.path());
  ASSERT_TRUE(registry.ok()) << registry.status();
  ASSERT_EQ(registry->tenants().size(), 2u);
  EXPECT_EQ(registry->tenants()[0].id, TenantId(1));
  EXPECT_EQ(registry->tenants()[0].name, "acme");
  EXPECT_EQ(registry->tenants()[0].max_concurrent_requests, 16);
  EXPECT_EQ(registry->tenants()[1].id, TenantId(2));
  EXPECT_EQ(registry->tenants()[1].name, "globex");
  EXPECT_EQ(registry->tenants()[1].max_concurrent_requests, 0);
}

TEST(TenantRegistryTest, FindsByIdAndName) {
  const TenantRegistry registry = Registry();
  EXPECT_EQ(registry.Find(TenantId(2))->name, "globex");
  EXPECT_EQ(registry.Find(kNoTenant), nullptr);
  EXPECT_EQ(registry.Find(TenantId(3)), nullptr);
  EXPECT_EQ(registry.FindByName("acme")->id, TenantId(1));
  EXPECT_EQ(registry.FindByName("initech"), nullptr);
}

TEST(TenantRegistryTest, UnreadableFileIsNotFound) {
  const auto missing = TenantRegistry::LoadFile("/nonexistent/tenants.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(),
                                "/nonexistent/tenants.json"));
  TempFile file("{}");
  EXPECT_EQ(TenantRegistry::LoadFile(file.dir()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TenantRegistryTest, AuthenticatesEveryKeyOfATenant) {
  const TenantRegistry registry = Registry();
  for (const std::string& header :
       {absl::StrCat("Bearer ", kAcmeKey), absl::StrCat("Bearer ", kAcmeKey2),
        absl::StrCat("bearer  ", kAcmeKey, " ")}) {
    auto tenant = registry.Authenticate(header);
    ASSERT_TRUE(tenant.ok()) << header << ": " << tenant.status();
    EXPECT_EQ((*tenant)->name, "acme");
  }
  auto tenant = registry.Authenticate(absl::StrCat("Bearer ", kGlobexKey));
  ASSERT_TRUE(tenant.ok());
  EXPECT_EQ((*tenant)->id, TenantId(2));
}

TEST(TenantRegistryTest, RejectsBadMissingAndOtherSchemesWithoutEchoingKey) {
  const TenantRegistry registry = Registry();
  const std::string wrong_key = "sk-wrong-secret-42";
  for (const std::string& header :
       {std::string(""), std::string("   "), absl::StrCat("Bearer ", wrong_key),
        absl::StrCat("Bearer ", kAcmeKey, "x"),
        absl::StrCat("Basic ", wrong_key), absl::StrCat("Basic ", kAcmeKey),
        absl::StrCat(kAcmeKey), std::string("Bearer"), std::string("Bearer "),
        absl::StrCat("Bearer ", kAcmeKey, " extra"),
        absl::StrCat("Bearer", kAcmeKey)}) {
    auto tenant = registry.Authenticate(header);
    ASSERT_EQ(tenant.status().code(), absl::StatusCode::kUnauthenticated)
        << header;
    const std::string message(tenant.status().message());
    EXPECT_FALSE(message.empty());
    EXPECT_FALSE(absl::StrContains(message, wrong_key)) << message;
    EXPECT_FALSE(absl::StrContains(message, kAcmeKey)) << message;
  }
}

// An empty key after the Bearer scheme is a missing key, not a wrong
// scheme.
TEST(TenantRegistryTest, BearerWithoutAKeyIsAMissingKey) {
  const TenantRegistry registry = Registry();
  for (const char* header : {"Bearer", "Bearer ", "bearer   "}) {
    auto tenant = registry.Authenticate(header);
    ASSERT_EQ(tenant.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_TRUE(absl::StrContains(tenant.status().message(), "missing API key"))
        << header << ": " << tenant.status().message();
  }
}

TEST(TenantRegistryTest, DuplicateKeyAcrossTenantsRejectedWithoutEchoingIt) {
  const std::string message = ParseError(absl::StrCat(
      R"({"tenants":[{"id":"a","api_keys":[")", kAcmeKey,
      R"("]},{"id":"b","api_keys":["sk-other",")", kAcmeKey, R"("]}]})"));
  EXPECT_TRUE(absl::StrContains(message, "$.tenants[1].api_keys[1]"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "$.tenants[0].api_keys[0]"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "duplicate API key")) << message;
  EXPECT_FALSE(absl::StrContains(message, kAcmeKey)) << message;
}

TEST(TenantRegistryTest, DuplicateKeyWithinATenantRejected) {
  ParseError(absl::StrCat(R"({"tenants":[{"id":"a","api_keys":[")", kAcmeKey,
                          R"(",")", kAcmeKey, R"("]}]})"));
}

TEST(TenantRegistryTest, ValidationErrorsNameTheJsonPath) {
  const struct {
    const char* json;
    const char* path;
  } cases[] = {
      {R"([])", "$"},
      {R"({})", "$"},
      {R"({"tenant":[]})", "$"},
      {R"({"tenants":{}})", "$.tenants"},
      {R"({"tenants":[]})", "$.tenants"},
      {R"({"tenants":[5]})", "$.tenants[0]"},
      {R"({"tenants":[{"api_keys":["k"]}]})", "$.tenants[0]"},
      {R"({"tenants":[{"id":7,"api_keys":["k"]}]})", "$.tenants[0].id"},
      {R"({"tenants":[{"id":"","api_keys":["k"]}]})", "$.tenants[0].id"},
      {R"({"tenants":[{"id":"a","api_keys":["k"]},{"id":"a","api_keys":["j"]}]})",
       "$.tenants[1].id"},
      {R"({"tenants":[{"id":"a"}]})", "$.tenants[0]"},
      {R"({"tenants":[{"id":"a","api_keys":"k"}]})", "$.tenants[0].api_keys"},
      {R"({"tenants":[{"id":"a","api_keys":[]}]})", "$.tenants[0].api_keys"},
      {R"({"tenants":[{"id":"a","api_keys":[""]}]})",
       "$.tenants[0].api_keys[0]"},
      {R"({"tenants":[{"id":"a","api_keys":["k",42]}]})",
       "$.tenants[0].api_keys[1]"},
      {R"({"tenants":[{"id":"a","api_keys":["two words"]}]})",
       "$.tenants[0].api_keys[0]"},
      {R"({"tenants":[{"id":"a","api_keys":["k"],"max_concurrent_requests":-1}]})",
       "$.tenants[0].max_concurrent_requests"},
      {R"({"tenants":[{"id":"a","api_keys":["k"],"max_concurrent_requests":"8"}]})",
       "$.tenants[0].max_concurrent_requests"},
      {R"({"tenants":[{"id":"a","api_keys":["k"],"max_concurent_requests":8}]})",
       "$.tenants[0]"},
  };
  for (const auto& c : cases) {
    const std::string message = ParseError(c.json);
    EXPECT_TRUE(absl::StrContains(message, absl::StrCat(c.path, ": ")))
        << c.json << " -> " << message;
  }
}

TEST(TenantRegistryTest, NotJsonRejectedWithoutQuotingTheText) {
  // The syntax error is right after a key; the parser's own message would
  // quote it.
  const std::string message = ParseError(
      absl::StrCat(R"({"tenants":[{"id":"a","api_keys":[")", kAcmeKey, "\"!"));
  EXPECT_TRUE(absl::StrContains(message, "not valid JSON")) << message;
  EXPECT_FALSE(absl::StrContains(message, kAcmeKey)) << message;
  ParseError("");
  ParseError("tenants: acme");
}

TEST(TenantRegistryTest, LoadFileErrorsNameTheFile) {
  TempFile file(R"({"tenants":[{"id":"a","api_keys":[1]}]})");
  auto registry = TenantRegistry::LoadFile(file.path());
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(registry.status().message(),
                               file.path() + ": $.tenants[0].api_keys[0]: "))
      << registry.status();
}

TEST(TenantRegistryTest, PointersSurviveMovingTheRegistry) {
  TenantRegistry registry = Registry();
  const Tenant* acme = registry.FindByName("acme");
  const TenantRegistry moved = std::move(registry);
  EXPECT_EQ(moved.FindByName("acme"), acme);
  auto tenant = moved.Authenticate(absl::StrCat("Bearer ", kAcmeKey));
  ASSERT_TRUE(tenant.ok());
  EXPECT_EQ(*tenant, acme);
}

}  // namespace
}  // namespace kvcanary::engine
