// --served-model-name: /v1/models lists the one served name, which a
// request's "model" may name or omit; any other name is a 404
// model_not_found (docs/api.md). The default without --model is
// kvcanary-synthetic.
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

// /v1/models' one id; "" if it does not list exactly one.
std::string ServedName(const Cluster& c) {
  HttpResult models = Get(c.router(), "/v1/models", "sk-acme");
  if (models.status != 200 || models.json["data"].size() != 1) return "";
  return models.json["data"][0]["id"];
}

int CompleteNaming(const Cluster& c, const json& model) {
  json body = {{"prompt", "Once"}, {"max_tokens", 1}};
  if (!model.is_null()) body["model"] = model;
  HttpResult r = Post(c.router(), "/v1/completions", body.dump(), "sk-acme");
  if (r.status == 200) EXPECT_EQ(r.json["model"], ServedName(c)) << r.body;
  if (r.status == 404) {
    EXPECT_EQ(r.json["error"]["code"], "model_not_found") << r.body;
  }
  return r.status;
}

TEST(ServedModelTest, TheEmbeddedModelIsServedAsKvcanarySynthetic) {
  Cluster c({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ServedName(c), "kvcanary-synthetic");
  EXPECT_EQ(CompleteNaming(c, nullptr), 200);
  EXPECT_EQ(CompleteNaming(c, "kvcanary-synthetic"), 200);
  EXPECT_EQ(CompleteNaming(c, "kvcanary"), 404);
}

TEST(ServedModelTest, UpPassesTheServedNameOnToTheRouter) {
  Cluster c({"--served-model-name=acme-llm-7b"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ServedName(c), "acme-llm-7b");
  EXPECT_EQ(CompleteNaming(c, nullptr), 200);
  EXPECT_EQ(CompleteNaming(c, "acme-llm-7b"), 200);
  EXPECT_EQ(CompleteNaming(c, "kvcanary-synthetic"), 404);
  EXPECT_EQ(CompleteNaming(c, "gpt-4o"), 404);
  HttpResult chat =
      Post(c.router(), "/v1/chat/completions",
           json{{"model", "acme-llm-7b"},
                {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                {"max_tokens", 1}}
               .dump(),
           "sk-acme");
  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json["model"], "acme-llm-7b") << chat.body;
}

}  // namespace
}  // namespace kvcanary::testing
