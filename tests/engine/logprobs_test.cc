// Log-probabilities in the engine (engine/model/logprobs.h): what they are,
// and that a request's are bitwise the same alone and in any batch
// (docs/exactness.md), for its generated tokens and for its prompt's.
#include "engine/model/logprobs.h"

#include <cmath>
#include <vector>

#include "engine/core/engine.h"
#include "engine/nodes/logprobs_wire.h"
#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace kvcanary::engine {
namespace {

constexpr int kTop = 5;

EngineOptions Options(int max_batch_seqs, int threads) {
  EngineOptions o;
  o.num_threads = threads;
  o.scheduler.max_batch_seqs = max_batch_seqs;
  return o;
}

SamplingParams WithLogprobs(int max_tokens, bool prompt) {
  SamplingParams s;
  s.max_tokens = max_tokens;
  s.logprobs = kTop;
  s.prompt_logprobs = prompt;
  return s;
}

struct Outcome {
  std::vector<int> output;
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;
  int cached_tokens = 0;
};

// Runs the prompts (tenant i % 8 + 1 each) in one engine, submitted
// `stagger` steps apart.
std::vector<Outcome> RunAll(const Model& model,
                            const std::vector<std::vector<int>>& prompts,
                            int max_tokens, int threads, int stagger,
                            bool prompt_logprobs) {
  Engine engine(&model, Options(static_cast<int>(prompts.size()), threads));
  std::vector<RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id =
        engine.Submit(TenantId(static_cast<uint32_t>(i % 8 + 1)), prompts[i],
                      WithLogprobs(max_tokens, prompt_logprobs));
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    for (int s = 0; s < stagger; ++s) engine.Step();
  }
  engine.RunUntilIdle();
  std::vector<Outcome> out;
  for (RequestId id : ids) {
    const Sequence& seq = *engine.Get(id);
    out.push_back({seq.output, seq.output_logprobs, seq.prompt_logprobs,
                   seq.cached_tokens});
  }
  return out;
}

TEST(LogprobsTest, AreANormalisedDistributionWithItsTopFirst) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  const TokenLogprobs all = ComputeLogprobs(logits.data(), 5, 2, 5);
  double mass = 0;
  for (const auto& [id, lp] : all.top) mass += std::exp(lp);
  EXPECT_NEAR(mass, 1.0, 1e-6);
  ASSERT_EQ(all.top.size(), 5u);
  // Most likely first; the tie between 1 and 3 goes to the lower id.
  EXPECT_EQ(all.top[0].first, 1);
  EXPECT_EQ(all.top[1].first, 3);
  EXPECT_EQ(all.top[0].second, all.top[1].second);
  EXPECT_EQ(all.top[4].first, 2);
  EXPECT_EQ(all.token, 2);
  EXPECT_EQ(all.logprob, all.top[4].second);
  EXPECT_NEAR(all.top[0].second - all.top[4].second, 5.0, 1e-5);
  EXPECT_TRUE(ComputeLogprobs(logits.data(), 5, 0, 0).top.empty());
}

TEST(LogprobsTest, CrossTheWireBitForBit) {
  const std::vector<float> logits = {0.1f, -7.25f, 3.3333333f, 1e-7f};
  std::vector<TokenLogprobs> sent = {ComputeLogprobs(logits.data(), 4, 1, 3),
                                     ComputeLogprobs(logits.data(), 4, 2, 0)};
  auto back = LogprobsFromJson(
      nlohmann::json::parse(LogprobsToJson(sent).dump()), 4, "positions");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, sent);
  // A null position (one the sender could not vouch for) reads as unknown
  // only where that is allowed.
  const auto with_null = nlohmann::json::parse(R"([null, [1, -1.0, []]])");
  auto unknown = LogprobsFromJson(with_null, 4, "x", /*null_is_unknown=*/true);
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ((*unknown)[0].token, -1);
  EXPECT_EQ((*unknown)[1].token, 1);
  EXPECT_FALSE(LogprobsFromJson(with_null, 4, "x").ok());
  // A token outside the vocabulary, a positive logprob, too many
  // alternatives: refused as corrupt.
  for (const char* bad :
       {R"([[4, -1.0, []]])", R"([[1, 0.5, []]])", R"([[1, -1.0, [[9, -1]]]])",
        R"([[1, -1.0]])", R"({"token": 1})"}) {
    EXPECT_FALSE(LogprobsFromJson(nlohmann::json::parse(bad), 4, "x").ok())
        << bad;
  }
}

TEST(LogprobsTest, AGreedyTokensLogprobIsItsDistributionsTop) {
  const Model model = DefaultModel();
  const auto runs = RunAll(
      model, testing::TokenPrompts(4, model.config.vocab_size), 12, 1, 0, true);
  for (const Outcome& r : runs) {
    ASSERT_EQ(r.logprobs.size(), r.output.size());
    for (size_t i = 0; i < r.output.size(); ++i) {
      const TokenLogprobs& p = r.logprobs[i];
      EXPECT_EQ(p.token, r.output[i]);
      ASSERT_EQ(p.top.size(), static_cast<size_t>(kTop));
      EXPECT_EQ(p.top[0].first, p.token);
      EXPECT_EQ(p.top[0].second, p.logprob);
      EXPECT_LE(p.logprob, 0.0f);
    }
  }
}

// 32 sequences, prompt log-probabilities included, on two threads, all at
// once and joining a step apart: each one's figures are bitwise its own
// alone.
TEST(LogprobsTest, AreBitIdenticalAloneAndInABatchOfThirtyTwo) {
  const Model model = DefaultModel();
  const auto prompts = testing::TokenPrompts(32, model.config.vocab_size);
  for (int stagger : {0, 1}) {
    const auto batched = RunAll(model, prompts, 16, 2, stagger, true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Outcome alone = RunAll(model, {prompts[i]}, 16, 1, 0, true)[0];
      EXPECT_EQ(alone.output, batched[i].output) << i;
      EXPECT_EQ(alone.logprobs, batched[i].logprobs) << i;
      EXPECT_EQ(alone.prompt_logprobs, batched[i].prompt_logprobs) << i;
      EXPECT_EQ(alone.prompt_logprobs.size(), prompts[i].size() - 1) << i;
    }
  }
}

// Scoring a continuation (echo with logprobs) gives bitwise what generating
// it reported: the last prompt position of prompt + [token] is the
// generated token's.
TEST(LogprobsTest, APromptsLogprobsAreWhatGeneratingItReported) {
  const Model model = DefaultModel();
  const auto prompts = testing::TokenPrompts(6, model.config.vocab_size);
  const auto generated = RunAll(model, prompts, 3, 1, 0, false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int> scored = prompts[i];
    scored.insert(scored.end(), generated[i].output.begin(),
                  generated[i].output.end());
    const Outcome r = RunAll(model, {scored}, 1, 2, 0, true)[0];
    ASSERT_EQ(r.prompt_logprobs.size(), scored.size() - 1);
    for (size_t k = 0; k < generated[i].output.size(); ++k) {
      EXPECT_EQ(r.prompt_logprobs[prompts[i].size() - 1 + k],
                generated[i].logprobs[k])
          << "prompt " << i << " token " << k;
    }
  }
}

// Prompt log-probabilities need every position computed: a request asking
// for them takes nothing from the prefix cache, and gets the same figures
// as the request that filled it.
TEST(LogprobsTest, PromptLogprobsComputeTheWholePromptDespiteTheCache) {
  const Model model = DefaultModel();
  std::vector<int> prompt =
      testing::TokenPrompts(1, model.config.vocab_size)[0];
  for (int t = 0; t < 40; ++t) prompt.push_back(3 + (t * 13) % 200);
  Engine engine(&model, Options(4, 1));
  std::vector<Outcome> runs;
  for (bool with_prompt : {true, false, true}) {
    auto id = engine.Submit(TenantId(1), prompt, WithLogprobs(2, with_prompt));
    ASSERT_TRUE(id.ok());
    engine.RunUntilIdle();
    const Sequence& seq = *engine.Get(*id);
    runs.push_back({seq.output, seq.output_logprobs, seq.prompt_logprobs,
                    seq.cached_tokens});
  }
  EXPECT_EQ(runs[0].cached_tokens, 0);
  EXPECT_GT(runs[1].cached_tokens, 0);  // the cache has the prompt
  EXPECT_EQ(runs[2].cached_tokens, 0);
  EXPECT_EQ(runs[2].prompt_logprobs, runs[0].prompt_logprobs);
  EXPECT_EQ(runs[1].logprobs, runs[0].logprobs);
}

}  // namespace
}  // namespace kvcanary::engine
