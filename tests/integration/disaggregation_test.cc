// Router -> prefill -> decode as real processes on loopback.
#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/core/engine.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/shared_files.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

std::string SharedDir() { return shared_files::Dir(); }

// What the single-process engine answers (greedy), as the router renders it.
std::string LocalAnswer(const engine::Model& model,
                        const engine::Tokenizer& tok, const std::string& prompt,
                        int max_tokens) {
  engine::Engine e(&model, engine::EngineOptions{});
  engine::SamplingParams s;
  s.max_tokens = max_tokens;
  auto ids = tok.Encode(prompt, true, false);
  auto id = e.Submit(TenantId(1), ids, s);
  EXPECT_TRUE(id.ok());
  e.RunUntilIdle();
  return tok.DecodeAll(ids.back(), e.Get(*id)->output);
}

class DisaggregationTest : public SharedClusterTest {};

TEST_F(DisaggregationTest,
       SixteenConcurrentClientsOfFourTenantsGetTheirOwnAnswers) {
  const engine::Model model = engine::DefaultModel();
  const engine::Tokenizer tok =
      engine::Tokenizer::Default(model.config.vocab_size);
  const char* keys[] = {"sk-acme", "sk-globex", "sk-initech", "sk-umbrella"};
  std::vector<std::string> prompts, answers(16);
  std::vector<int> statuses(16);
  for (int i = 0; i < 16; ++i) {
    prompts.push_back("client " + std::to_string(i) +
                      " says the little dog ran " + std::string(i % 5, '!'));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      HttpResult r = Post(cluster_->router(), "/v1/completions",
                          Completion(prompts[i], 20 + i), keys[i % 4]);
      statuses[i] = r.status;
      if (r.status != 200) answers[i] = r.body;
      if (r.status == 200)
        answers[i] = r.json["choices"][0]["text"].get<std::string>();
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(statuses[i], 200) << "client " << i << ": " << answers[i];
    EXPECT_EQ(answers[i], LocalAnswer(model, tok, prompts[i], 20 + i))
        << "client " << i;
  }
}

TEST_F(DisaggregationTest, UsageCountsTheRealTokens) {
  HttpResult r = Post(cluster_->router(), "/v1/completions",
                      Completion("Once upon a time", 7), "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  const engine::Tokenizer tok = engine::Tokenizer::Default(512);
  EXPECT_EQ(
      r.json["usage"]["prompt_tokens"].get<int>(),
      static_cast<int>(tok.Encode("Once upon a time", true, false).size()));
  EXPECT_LE(r.json["usage"]["completion_tokens"].get<int>(), 7);
  EXPECT_EQ(r.json["object"], "text_completion");
}

TEST_F(DisaggregationTest, StreamingSendsTheSameTextThenDone) {
  HttpResult whole = Post(cluster_->router(), "/v1/completions",
                          Completion("A cat sat", 16), "sk-globex");
  ASSERT_EQ(whole.status, 200);
  HttpResult streamed =
      Post(cluster_->router(), "/v1/completions",
           Completion("A cat sat", 16, /*stream=*/true), "sk-globex");
  ASSERT_EQ(streamed.status, 200);
  std::string text;
  std::istringstream lines(streamed.body);
  std::string line, last_data;
  while (std::getline(lines, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    last_data = line.substr(6);
    if (last_data == "[DONE]") break;
    auto chunk = json::parse(last_data);
    text += chunk["choices"][0].value("text", "");
  }
  EXPECT_EQ(last_data, "[DONE]");
  EXPECT_EQ(text, whole.json["choices"][0]["text"].get<std::string>());
}

TEST_F(DisaggregationTest, ChatCompletionsAnswer) {
  json j;
  j["messages"] =
      json::array({{{"role", "user"}, {"content", "Tell me a story"}}});
  j["max_tokens"] = 8;
  HttpResult r =
      Post(cluster_->router(), "/v1/chat/completions", j.dump(), "sk-initech");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "chat.completion");
  EXPECT_EQ(r.json["choices"][0]["message"]["role"], "assistant");
}

TEST_F(DisaggregationTest, OverLongPromptIs400AndAllocatesNothingOnEitherNode) {
  std::string prompt;
  for (int i = 0; i < 400; ++i) prompt += "x ";
  HttpResult r = Post(cluster_->router(), "/v1/completions",
                      Completion(prompt, 4), "sk-acme");
  EXPECT_EQ(r.status, 400);
  ASSERT_TRUE(r.json.is_object()) << r.body;
  EXPECT_EQ(r.json["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(r.json["error"]["type"], "invalid_request_error");
  for (const std::string& node : {cluster_->prefill(), cluster_->decode()}) {
    const std::string metrics = Get(node, "/metrics").body;
    EXPECT_EQ(MetricValue(metrics, "kvcanary_node_kv_pages", "state=\"used\""),
              0)
        << node;
  }
}

TEST_F(DisaggregationTest, BadOrMissingKeyIs401) {
  HttpResult bad = Post(cluster_->router(), "/v1/completions",
                        Completion("hi", 2), "sk-nope");
  EXPECT_EQ(bad.status, 401);
  EXPECT_EQ(bad.json["error"]["type"], "authentication_error");
  EXPECT_EQ(bad.body.find("sk-nope"), std::string::npos);
  EXPECT_EQ(Post(cluster_->router(), "/v1/completions", Completion("hi", 2), "")
                .status,
            401);
}

TEST_F(DisaggregationTest, MalformedJsonIs400) {
  HttpResult r =
      Post(cluster_->router(), "/v1/completions", "{\"prompt\": ", "sk-acme");
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(r.json["error"].is_object()) << r.body;
  HttpResult wrong =
      Post(cluster_->router(), "/v1/completions",
           R"({"prompt": "hi", "max_tokens": "ten"})", "sk-acme");
  EXPECT_EQ(wrong.status, 400);
  EXPECT_EQ(wrong.json["error"]["param"], "max_tokens");
}

TEST_F(DisaggregationTest, ModelsAndHealth) {
  EXPECT_EQ(Get(cluster_->router(), "/health").status, 200);
  EXPECT_EQ(Get(cluster_->router(), "/v1/models").status, 401);
  HttpResult models = Get(cluster_->router(), "/v1/models", "sk-acme");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json["object"], "list");
}

TEST(DisaggregationGoldenTest, GreedyThroughRouterMatchesTheReference) {
  KVC_REQUIRE_SHARED("models/stories260K.bin", "models/tok512.bin",
                     "golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt",
                     "golden/stories260K_t0_n200_noprompt.txt");
  const std::string models = SharedDir() + "/models";
  std::ifstream golden_file(
      SharedDir() + "/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  std::stringstream golden;
  golden << golden_file.rdbuf();
  Cluster cluster({"--model=" + models + "/stories260K.bin",
                   "--tokenizer=" + models + "/tok512.bin"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion("Once upon a time", 252), "sk-umbrella");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ("Once upon a time" +
                r.json["choices"][0]["text"].get<std::string>() + "\n",
            golden.str());
  // The second golden: no prompt (BOS only), 200 positions.
  std::ifstream noprompt_file(SharedDir() +
                              "/golden/stories260K_t0_n200_noprompt.txt");
  std::stringstream noprompt;
  noprompt << noprompt_file.rdbuf();
  HttpResult empty =
      Post(cluster.router(), "/v1/completions", Completion("", 200), "sk-acme");
  ASSERT_EQ(empty.status, 200) << empty.body;
  EXPECT_EQ(empty.json["choices"][0]["text"].get<std::string>() + "\n",
            noprompt.str());
}

// `up` with a GGUF model and no tokenizer file: every node takes the
// file's own tokenizer, and at the trained context the answer is run.c's.
TEST(DisaggregationGoldenTest, AGgufModelServesTheReferenceAnswer) {
  KVC_REQUIRE_SHARED("models/stories260K.gguf",
                     "golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  const std::string models = SharedDir() + "/models";
  std::ifstream golden_file(
      SharedDir() + "/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  std::stringstream golden;
  golden << golden_file.rdbuf();
  Cluster cluster({"--model=" + models + "/stories260K.gguf", "--context=512"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion("Once upon a time", 252), "sk-umbrella");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ("Once upon a time" +
                r.json["choices"][0]["text"].get<std::string>() + "\n",
            golden.str());
}

TEST(DisaggregationDamageTest, CorruptedPageByteIsRejectedAsDataLoss) {
  Cluster cluster({"--test_transfer_damage=flip-byte"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion("hello there", 8), "sk-acme");
  EXPECT_EQ(r.status, 502) << r.body;
  EXPECT_NE(r.body.find("CRC"), std::string::npos) << r.body;
  const std::string metrics = Get(cluster.decode(), "/metrics").body;
  EXPECT_EQ(MetricValue(metrics, "kvcanary_node_kv_pages", "state=\"used\""),
            0);
}

TEST(DisaggregationDamageTest, TruncatedFrameIsRejectedAsDataLoss) {
  Cluster cluster({"--test_transfer_damage=truncate"});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion("hello there", 8), "sk-acme");
  EXPECT_EQ(r.status, 502) << r.body;
  const std::string prefill_metrics = Get(cluster.prefill(), "/metrics").body;
  EXPECT_EQ(
      MetricValue(prefill_metrics, "kvcanary_node_kv_pages", "state=\"used\""),
      0);
}

}  // namespace
}  // namespace kvcanary::testing
