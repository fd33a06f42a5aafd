// The tenants file's one parser: both key forms, every malformed case
// named by its JSON path, duplicates refused, unknown fields per reader, and
// no key text in any error.
#include "common/tenants_file.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

constexpr char kKey[] = "sk-acme-0123456789";
constexpr TenantsFileOptions kLenient{};
constexpr TenantsFileOptions kStrict{/*reject_unknown_fields=*/true};

// Parses `json` expecting kInvalidArgument starting "t.json: "; returns the
// message.
std::string Error(const std::string& json,
                  const TenantsFileOptions& options = kStrict) {
  const auto tenants = ParseTenantsFile(json, "t.json", options);
  EXPECT_EQ(tenants.status().code(), absl::StatusCode::kInvalidArgument)
      << json;
  const std::string message(tenants.status().message());
  EXPECT_TRUE(absl::StartsWith(message, "t.json: ")) << message;
  return message;
}

TEST(TenantsFileTest, ReadsTenantsInFileOrderWithBothKeyForms) {
  const auto tenants = ParseTenantsFile(R"({"tenants": [
      {"id": "acme", "api_keys": ["sk-a1", "sk-a2"],
       "max_concurrent_requests": 16},
      {"id": "globex", "api_key": "sk-g"},
      {"id": "initech", "api_key": "sk-i0", "api_keys": ["sk-i1"]}]})",
                                        "t.json", kStrict);
  ASSERT_TRUE(tenants.ok()) << tenants.status();
  ASSERT_EQ(tenants->size(), 3u);
  EXPECT_EQ((*tenants)[0].id, "acme");
  EXPECT_EQ((*tenants)[0].api_keys,
            (std::vector<std::string>{"sk-a1", "sk-a2"}));
  EXPECT_EQ((*tenants)[0].max_concurrent_requests, 16);
  EXPECT_EQ((*tenants)[0].json_path, "$.tenants[0]");
  EXPECT_EQ((*tenants)[1].id, "globex");
  EXPECT_EQ((*tenants)[1].api_keys, (std::vector<std::string>{"sk-g"}));
  EXPECT_FALSE((*tenants)[1].max_concurrent_requests.has_value());
  // "api_key" first, then "api_keys".
  EXPECT_EQ((*tenants)[2].api_keys,
            (std::vector<std::string>{"sk-i0", "sk-i1"}));
}

TEST(TenantsFileTest, EachMalformedCaseNamesItsJsonPath) {
  const struct {
    const char* json;
    const char* path;
  } cases[] = {
      {R"([])", "$"},
      {R"({})", "$"},
      {R"({"tenants":{}})", "$.tenants"},
      {R"({"tenants":[]})", "$.tenants"},
      {R"({"tenants":[5]})", "$.tenants[0]"},
      {R"({"tenants":[{"api_keys":["k"]}]})", "$.tenants[0]"},
      {R"({"tenants":[{"id":7,"api_keys":["k"]}]})", "$.tenants[0].id"},
      {R"({"tenants":[{"id":"","api_keys":["k"]}]})", "$.tenants[0].id"},
      {R"({"tenants":[{"id":"a"}]})", "$.tenants[0]"},
      {R"({"tenants":[{"id":"a","api_keys":"k"}]})", "$.tenants[0].api_keys"},
      {R"({"tenants":[{"id":"a","api_keys":[]}]})", "$.tenants[0].api_keys"},
      {R"({"tenants":[{"id":"a","api_keys":[""]}]})",
       "$.tenants[0].api_keys[0]"},
      {R"({"tenants":[{"id":"a","api_keys":["k",42]}]})",
       "$.tenants[0].api_keys[1]"},
      {R"({"tenants":[{"id":"a","api_keys":["two words"]}]})",
       "$.tenants[0].api_keys[0]"},
      {R"({"tenants":[{"id":"a","api_key":7}]})", "$.tenants[0].api_key"},
      {R"({"tenants":[{"id":"a","api_key":"tab\tkey"}]})",
       "$.tenants[0].api_key"},
      {R"({"tenants":[{"id":"a","api_keys":["k"],"max_concurrent_requests":-1}]})",
       "$.tenants[0].max_concurrent_requests"},
      {R"({"tenants":[{"id":"a","api_keys":["k"],"max_concurrent_requests":"8"}]})",
       "$.tenants[0].max_concurrent_requests"},
      {R"({"tenants":[{"id":"a","api_keys":["k"],"max_concurrent_requests":4294967296}]})",
       "$.tenants[0].max_concurrent_requests"},
  };
  for (const auto& c : cases) {
    for (const TenantsFileOptions& options : {kStrict, kLenient}) {
      const std::string message = Error(c.json, options);
      EXPECT_TRUE(absl::StrContains(message, absl::StrCat(c.path, ": ")))
          << c.json << " -> " << message;
    }
  }
}

TEST(TenantsFileTest, MissingKeyNamesTheTenant) {
  const std::string message =
      Error(R"({"tenants":[{"id":"acme","api_key":"k"},{"id":"globex"}]})");
  EXPECT_TRUE(absl::StrContains(message, "$.tenants[1]: ")) << message;
  EXPECT_TRUE(absl::StrContains(message, "'globex' has no key")) << message;
}

TEST(TenantsFileTest, DuplicateIdNamesBothPlaces) {
  const std::string message = Error(R"({"tenants":[
      {"id":"acme","api_keys":["k1"]},{"id":"acme","api_keys":["k2"]}]})");
  EXPECT_TRUE(absl::StrContains(message, "$.tenants[1].id: ")) << message;
  EXPECT_TRUE(absl::StrContains(message,
                                "'acme' is listed twice (also at "
                                "$.tenants[0])"))
      << message;
}

TEST(TenantsFileTest, DuplicateKeyAcrossTenantsNamesBothWithoutTheKey) {
  const std::string message = Error(
      absl::StrCat(R"({"tenants":[{"id":"acme","api_keys":["other",")", kKey,
                   R"("]},{"id":"globex","api_key":")", kKey, R"("}]})"));
  EXPECT_TRUE(absl::StrContains(message,
                                "$.tenants[1].api_key: duplicate API key "
                                "(also at $.tenants[0].api_keys[1])"))
      << message;
  EXPECT_TRUE(absl::StrContains(message, "'acme' and 'globex'")) << message;
  EXPECT_FALSE(absl::StrContains(message, kKey)) << message;
}

TEST(TenantsFileTest, DuplicateKeyWithinATenantIsRefused) {
  const std::string message =
      Error(absl::StrCat(R"({"tenants":[{"id":"a","api_key":")", kKey,
                         R"(","api_keys":[")", kKey, R"("]}]})"));
  EXPECT_TRUE(absl::StrContains(message,
                                "$.tenants[0].api_keys[0]: "
                                "duplicate API key (also at "
                                "$.tenants[0].api_key)"))
      << message;
  EXPECT_FALSE(absl::StrContains(message, kKey)) << message;
}

TEST(TenantsFileTest, UnknownFieldsAreRefusedOnlyWhenStrict) {
  const std::string top = R"({"tenants":[{"id":"a","api_keys":["k"]}],
                              "version":2})";
  const std::string typo =
      R"({"tenants":[{"id":"a","api_keys":["k"],"max_concurent_requests":8}]})";
  EXPECT_TRUE(absl::StrContains(Error(top), R"($: unknown field "version")"));
  EXPECT_TRUE(absl::StrContains(
      Error(typo), R"($.tenants[0]: unknown field "max_concurent_requests")"));
  EXPECT_TRUE(ParseTenantsFile(top, "t.json", kLenient).ok());
  EXPECT_TRUE(ParseTenantsFile(typo, "t.json", kLenient).ok());
}

TEST(TenantsFileTest, NotJsonIsRefusedWithoutQuotingTheText) {
  // The syntax error is right after a key; the JSON parser's own message
  // would quote it.
  const std::string message = Error(
      absl::StrCat(R"({"tenants":[{"id":"a","api_keys":[")", kKey, R"(" x)"));
  EXPECT_TRUE(absl::StrContains(message, "$: not valid JSON")) << message;
  EXPECT_FALSE(absl::StrContains(message, kKey)) << message;
}

TEST(TenantsFileTest, ReadingAFileUsesItsPathAsSource) {
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/kvcanary-tenants-file-", getpid(), ".json");
  ASSERT_TRUE(
      WriteFileAtomically(path, R"({"tenants":[{"id":"a"}]})", 0644).ok());
  const auto bad = ReadTenantsFile(path, kLenient);
  std::remove(path.c_str());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(bad.status().message(), path + ": $.tenants[0]"))
      << bad.status();
  const auto missing = ReadTenantsFile(path, kLenient);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(missing.status().message(), path));
}

TEST(TenantsFileTest, ApiKeysMustSurviveABearerHeader) {
  EXPECT_TRUE(IsValidApiKey("sk-abc_123.XYZ"));
  EXPECT_FALSE(IsValidApiKey(""));
  EXPECT_FALSE(IsValidApiKey("two words"));
  EXPECT_FALSE(IsValidApiKey("line\nbreak"));
  EXPECT_FALSE(IsValidApiKey("del\x7f"));
}

TEST(TenantsFileTest, CacheSaltsHoldNoControlCharacterC0DelOrC1) {
  EXPECT_TRUE(IsValidCacheSalt("acme-salt"));
  EXPECT_TRUE(IsValidCacheSalt("caf\xc3\xa9"));   // U+00E9
  EXPECT_TRUE(IsValidCacheSalt("nbsp\xc2\xa0"));  // U+00A0, not a control
  EXPECT_FALSE(IsValidCacheSalt(""));
  EXPECT_FALSE(IsValidCacheSalt(std::string(kMaxCacheSaltBytes + 1, 'a')));
  EXPECT_FALSE(IsValidCacheSalt("tab\t"));
  EXPECT_FALSE(IsValidCacheSalt("del\x7f"));
  EXPECT_FALSE(IsValidCacheSalt("nel\xc2\x85"));  // U+0085 NEXT LINE
  EXPECT_FALSE(IsValidCacheSalt("\xc2\x80"));     // U+0080
  EXPECT_FALSE(IsValidCacheSalt("csi\xc2\x9b"));  // U+009B
}

}  // namespace
}  // namespace kvcanary
