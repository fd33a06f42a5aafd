// --chat-template on `up`: the router renders chat messages into the prompt
// plainly (contents joined by newlines, the default) or, with kvcanary, in a
// header and role markers as real chat templates do; either way the
// template's tokens are the prompt's (docs/api.md, "Chat rendering").
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

// usage.prompt_tokens of a one-token answer to `path` with `body`.
int PromptTokens(const Cluster& c, const std::string& path, const json& body) {
  HttpResult r = Post(c.router(), path, body.dump(), "sk-acme");
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return -1;
  return r.json["usage"]["prompt_tokens"].get<int>();
}

// The chat prompt's tokens beyond the same text sent as a completion.
int TemplateTokens(const Cluster& c) {
  const int completion = PromptTokens(
      c, "/v1/completions", {{"prompt", "Hi there"}, {"max_tokens", 1}});
  const int chat =
      PromptTokens(c, "/v1/chat/completions",
                   {{"messages", {{{"role", "user"}, {"content", "Hi there"}}}},
                    {"max_tokens", 1}});
  return chat - completion;
}

TEST(ChatTemplateTest, PlainAddsNothingAndKvcanaryAHeaderAndRoleMarkers) {
  Cluster plain({});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(TemplateTokens(plain), 0);
  Cluster wrapped({"--chat-template=kvcanary"});
  ASSERT_TRUE(wrapped.ok());
  EXPECT_GE(TemplateTokens(wrapped), 16);
}

TEST(ChatTemplateTest, AnUnknownTemplateIsRefusedByUp) {
  Cluster c({"--chat-template=chatml"});
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace kvcanary::testing
