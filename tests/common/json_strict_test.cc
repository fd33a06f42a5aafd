#include "common/json_strict.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

using json = nlohmann::json;

// The duplicate key's path a status carries, "" if none.
std::string Param(const absl::Status& status) {
  auto p = status.GetPayload(kJsonParamUrl);
  return p.has_value() ? std::string(*p) : "";
}

TEST(JsonStrictTest, ParsesWhatNlohmannParses) {
  const std::string text =
      R"({"a": [1, -2, 3.5, "x", null, true, {"b": {}}, []], "c": {"d": 1}})";
  auto j = ParseJsonStrict(text);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(*j, json::parse(text));
  auto scalar = ParseJsonStrict(" 18446744073709551615 ");
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_TRUE(scalar->is_number_unsigned());
}

TEST(JsonStrictTest, WhitespaceAfterTheValueIsFine) {
  auto j = ParseJsonStrict("{\"a\":1} \r\n\t ");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["a"], 1);
}

TEST(JsonStrictTest, ANulAndMoreJsonAfterTheValueIsRefused) {
  const std::string text = std::string(R"({"prompt":"hi","max_tokens":1})") +
                           '\0' + R"({"max_tokens":400000})";
  auto j = ParseJsonStrict(text);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("NUL byte at offset 30"),
            std::string::npos)
      << j.status();
}

TEST(JsonStrictTest, ANulAloneAfterTheValueOrInAStringIsRefused) {
  EXPECT_FALSE(ParseJsonStrict(std::string("{}\0", 3)).ok());
  EXPECT_FALSE(ParseJsonStrict(std::string("{\"a\":\"x\0y\"}", 11)).ok());
}

TEST(JsonStrictTest, TrailingBytesAreRefused) {
  for (const char* text : {"{}xyz", "{} {}", "1 2", "{\"a\":1}}", "[] ,"}) {
    auto j = ParseJsonStrict(text);
    ASSERT_FALSE(j.ok()) << text;
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_TRUE(absl::StartsWith(j.status().message(), "invalid JSON: "))
        << j.status();
  }
}

TEST(JsonStrictTest, SyntaxErrorsAndHugeNumbersAreRefused) {
  for (const char* text : {"", "{", "{\"a\"}", "[1,]", "1e400", "nul"}) {
    auto j = ParseJsonStrict(text);
    ASSERT_FALSE(j.ok()) << text;
    EXPECT_EQ(Param(j.status()), "") << text;
  }
}

TEST(JsonStrictTest, ADuplicateTopLevelKeyIsRefusedNamingIt) {
  auto j = ParseJsonStrict(R"({"max_tokens":1,"prompt":"a","max_tokens":9})");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Param(j.status()), "max_tokens");
  EXPECT_NE(j.status().message().find("duplicate key 'max_tokens'"),
            std::string::npos)
      << j.status();
}

TEST(JsonStrictTest, ADuplicateNestedKeyIsRefusedNamingItsPath) {
  auto j =
      ParseJsonStrict(R"({"messages":[{"role":"user","content":"a"},)"
                      R"({"role":"user","content":"b","role":"system"}]})");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(Param(j.status()), "messages[1].role");
  auto deep = ParseJsonStrict(R"({"a":{"b":[[{"c":1,"c":2}]]}})");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(Param(deep.status()), "a.b[0][0].c");
  auto top = ParseJsonStrict(R"([{"x":1},{"x":1,"x":1}])");
  ASSERT_FALSE(top.ok());
  EXPECT_EQ(Param(top.status()), "[1].x");
}

TEST(JsonStrictTest, TheSameKeyInSiblingObjectsIsFine) {
  auto j =
      ParseJsonStrict(R"({"a":{"k":1},"b":{"k":2},"k":[{"k":3},{"k":4}]})");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["k"][1]["k"], 4);
}

}  // namespace
}  // namespace kvcanary
