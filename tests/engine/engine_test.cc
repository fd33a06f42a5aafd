#include "engine/core/engine.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/test_models.h"

namespace kvcanary::engine {
namespace {

using testing::EightPrompts;
using testing::ReadFile;
using testing::SharedDir;
using testing::TokenPrompts;

EngineOptions Options(int max_batch_seqs = 16, int threads = 1) {
  EngineOptions o;
  o.num_threads = threads;
  o.scheduler.max_batch_seqs = max_batch_seqs;
  return o;
}

SamplingParams Greedy(int max_tokens) {
  SamplingParams s;
  s.max_tokens = max_tokens;
  return s;
}

// llama2.c's run -n N semantics: N positions including BOS and the prompt.
std::string RunLikeReference(const testing::RealModel& m,
                             const std::string& prompt, int positions) {
  Engine engine(&m.model, Options());
  auto ids = m.tokenizer.Encode(prompt, true, false);
  const int max_tokens = positions - static_cast<int>(ids.size()) + 1;
  auto id = engine.Submit(TenantId(1), ids, Greedy(max_tokens));
  EXPECT_TRUE(id.ok()) << id.status();
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(*id);
  std::vector<int> all(seq.prompt.begin() + 1, seq.prompt.end());
  all.insert(all.end(), seq.output.begin(), seq.output.end());
  return m.tokenizer.DecodeAll(kBosToken, all) + "\n";
}

TEST(EngineGoldenTest, OnceUponATimeMatchesReferenceByteForByte) {
  KVC_REQUIRE_SHARED("golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  KVC_REQUIRE_STORIES260K(m);
  auto golden = ReadFile(
      SharedDir() + "/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  ASSERT_TRUE(golden);
  EXPECT_EQ(RunLikeReference(*m, "Once upon a time", 256), *golden);
}

TEST(EngineGoldenTest, EmptyPromptMatchesReferenceByteForByte) {
  KVC_REQUIRE_SHARED("golden/stories260K_t0_n200_noprompt.txt");
  KVC_REQUIRE_STORIES260K(m);
  auto golden =
      ReadFile(SharedDir() + "/golden/stories260K_t0_n200_noprompt.txt");
  ASSERT_TRUE(golden);
  EXPECT_EQ(RunLikeReference(*m, "", 200), *golden);
}

TEST(EngineGoldenTest, TokenIdsMatchReference) {
  KVC_REQUIRE_STORIES260K(m);
  KVC_REQUIRE_SHARED(
      "golden/stories260K_t0_n256_prompt_Once_upon_a_time.ids.txt");
  auto golden =
      ReadFile(SharedDir() +
               "/golden/stories260K_t0_n256_prompt_Once_upon_a_time.ids.txt");
  ASSERT_TRUE(golden);
  const size_t at = golden->find("sequence:");
  ASSERT_NE(at, std::string::npos);
  std::istringstream in(golden->substr(at + 9));
  std::vector<int> want;
  for (int t; in >> t;) want.push_back(t);
  Engine engine(&m->model, Options());
  auto ids = m->tokenizer.Encode("Once upon a time", true, false);
  auto id = engine.Submit(TenantId(1), ids, Greedy(256 - 5 + 1));
  ASSERT_TRUE(id.ok());
  engine.RunUntilIdle();
  std::vector<int> got = engine.Get(*id)->prompt;
  got.insert(got.end(), engine.Get(*id)->output.begin(),
             engine.Get(*id)->output.end());
  EXPECT_EQ(got, want);
}

// Runs `prompts` (tenant i+1 each) concurrently, submitted `stagger` steps
// apart, and returns each output.
std::vector<std::vector<int>> RunBatch(const Model& model, const Tokenizer& tok,
                                       const std::vector<std::string>& prompts,
                                       int max_tokens, int threads,
                                       int stagger) {
  Engine engine(&model, Options(16, threads));
  std::vector<RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id =
        engine.Submit(TenantId(static_cast<uint32_t>(i + 1)),
                      tok.Encode(prompts[i], true, false), Greedy(max_tokens));
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    for (int s = 0; s < stagger; ++s) engine.Step();
  }
  engine.RunUntilIdle();
  std::vector<std::vector<int>> out;
  for (RequestId id : ids) {
    const Sequence* seq = engine.Get(id);
    EXPECT_TRUE(seq->violations.empty()) << seq->violations[0].DebugString();
    EXPECT_NE(seq->state.finish_reason(), FinishReason::kAbort);
    out.push_back(seq->output);
  }
  return out;
}

TEST(EngineBatchInvarianceTest,
     GreedyOutputIsIdenticalAloneAndWithSevenOthers) {
  KVC_REQUIRE_STORIES260K(m);
  const auto& prompts = EightPrompts();
  for (int threads : {1, 2}) {
    const auto batched =
        RunBatch(m->model, m->tokenizer, prompts, 120, threads, 0);
    const auto staggered =
        RunBatch(m->model, m->tokenizer, prompts, 120, threads, 3);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto alone =
          RunBatch(m->model, m->tokenizer, {prompts[i]}, 120, 1, 0);
      EXPECT_EQ(alone[0], batched[i])
          << "prompt " << i << " threads " << threads;
      EXPECT_EQ(alone[0], staggered[i])
          << "prompt " << i << " threads " << threads;
    }
  }
}

TEST(EngineBatchInvarianceTest, HoldsOnTheEmbeddedDefaultModel) {
  const Model model = DefaultModel();
  const Tokenizer tok = Tokenizer::Default(model.config.vocab_size);
  const auto& prompts = EightPrompts();
  const auto batched = RunBatch(model, tok, prompts, 40, 2, 1);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(RunBatch(model, tok, {prompts[i]}, 40, 1, 0)[0], batched[i]) << i;
  }
}

// Runs token prompts (tenant i % 8 + 1 each) in one engine that batches
// them all, submitted `stagger` steps apart; returns each output.
std::vector<std::vector<int>> RunTokenBatch(
    const Model& model, const std::vector<std::vector<int>>& prompts,
    int max_tokens, int threads, int stagger) {
  Engine engine(&model, Options(static_cast<int>(prompts.size()), threads));
  std::vector<RequestId> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto id = engine.Submit(TenantId(static_cast<uint32_t>(i % 8 + 1)),
                            prompts[i], Greedy(max_tokens));
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
    for (int s = 0; s < stagger; ++s) engine.Step();
  }
  engine.RunUntilIdle();
  std::vector<std::vector<int>> out;
  for (RequestId id : ids) out.push_back(engine.Get(id)->output);
  return out;
}

TEST(EngineBatchInvarianceTest, HoldsForThirtyTwoSequencesOnTwoThreads) {
  const Model model = DefaultModel();
  const auto prompts = TokenPrompts(32, model.config.vocab_size);
  for (int stagger : {0, 1}) {
    const auto batched = RunTokenBatch(model, prompts, 24, 2, stagger);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(RunTokenBatch(model, {prompts[i]}, 24, 1, 0)[0], batched[i])
          << "prompt " << i << " stagger " << stagger;
    }
  }
}

// The 15M shape's layers do not stay in cache: its steps are split by
// sequences only with enough rows per thread (16 here), by rows otherwise.
TEST(EngineBatchInvarianceTest, HoldsOnTheFifteenMShape) {
  const Model model = SyntheticModel(Stories15MShapeConfig(), 3);
  const auto prompts = TokenPrompts(17, model.config.vocab_size);
  const auto batched = RunTokenBatch(model, prompts, 6, 2, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(RunTokenBatch(model, {prompts[i]}, 6, 1, 0)[0], batched[i])
        << "prompt " << i;
  }
}

TEST(EngineTest, NewSequencesJoinWhileOthersDecode) {
  const Model model = DefaultModel();
  const Tokenizer tok = Tokenizer::Default(model.config.vocab_size);
  Engine engine(&model, Options());
  auto a =
      engine.Submit(TenantId(1), tok.Encode("first", true, false), Greedy(30));
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 5; ++i) engine.Step();
  auto b =
      engine.Submit(TenantId(2), tok.Encode("second", true, false), Greedy(30));
  ASSERT_TRUE(b.ok());
  engine.Step();  // b is prefilled in the same step a decodes
  EXPECT_EQ(engine.Get(*a)->output.size(), 6u);
  EXPECT_EQ(engine.Get(*b)->output.size(), 1u);
  EXPECT_EQ(engine.Get(*b)->state.phase(), RequestPhase::kDecoding);
  engine.RunUntilIdle();
  EXPECT_TRUE(engine.Get(*a)->state.finished());
  EXPECT_TRUE(engine.Get(*b)->state.finished());
  EXPECT_EQ(engine.pool().num_used_pages(), 0);
}

TEST(EngineTest, WaitsForPagesInsteadOfFailing) {
  const Model model = DefaultModel();
  const Tokenizer tok = Tokenizer::Default(model.config.vocab_size);
  EngineOptions o = Options();
  o.num_pages = 4;  // 64 tokens: one request of 40 at a time
  Engine engine(&model, o);
  std::vector<RequestId> ids;
  for (int i = 0; i < 3; ++i) {
    auto id = engine.Submit(TenantId(i + 1), tok.Encode("hello", true, false),
                            Greedy(40));
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  engine.Step();
  EXPECT_EQ(engine.Get(ids[0])->state.phase(), RequestPhase::kDecoding);
  EXPECT_EQ(engine.Get(ids[1])->state.phase(), RequestPhase::kAdmitted);
  engine.RunUntilIdle();
  for (RequestId id : ids) {
    EXPECT_NE(engine.Get(id)->state.finish_reason(), FinishReason::kAbort);
  }
}

TEST(EngineTest, StopsAtMaxTokensAndAtTheEndOfTheContext) {
  const Model model = DefaultModel();
  const Tokenizer tok = Tokenizer::Default(model.config.vocab_size);
  Engine engine(&model, Options());
  auto id = engine.Submit(TenantId(1), tok.Encode("x", true, false), Greedy(7));
  ASSERT_TRUE(id.ok());
  engine.RunUntilIdle();
  const Sequence* seq = engine.Get(*id);
  if (seq->state.finish_reason() == FinishReason::kLength) {
    EXPECT_EQ(seq->output.size(), 7u);
  } else {
    EXPECT_EQ(seq->state.finish_reason(), FinishReason::kStop);
    EXPECT_LT(seq->output.size(), 7u);
  }
  // A prompt of seq_len - 1 tokens leaves room for exactly one more.
  std::vector<int> long_prompt(model.config.seq_len - 1, 300);
  long_prompt[0] = kBosToken;
  auto full = engine.Submit(TenantId(1), long_prompt, Greedy(100));
  ASSERT_TRUE(full.ok()) << full.status();
  engine.RunUntilIdle();
  EXPECT_LE(engine.Get(*full)->num_tokens(), model.config.seq_len + 1);
}

TEST(EngineTest, InvalidRequestsAreRejected) {
  const Model model = DefaultModel();
  Engine engine(&model, Options());
  EXPECT_EQ(engine.Submit(TenantId(1), {}, Greedy(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit(TenantId(1), {1, 99999}, Greedy(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit(TenantId(1), {1, -3}, Greedy(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int> too_long(model.config.seq_len, 5);
  EXPECT_EQ(engine.Submit(TenantId(1), too_long, Greedy(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit(TenantId(1), {1, 5}, Greedy(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  SamplingParams bad = Greedy(4);
  bad.top_p = 1.5f;
  EXPECT_EQ(engine.Submit(TenantId(1), {1, 5}, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(engine.has_work());
}

TEST(EngineTest, AbortFreesPagesAndFinishesWithReason) {
  const Model model = DefaultModel();
  Engine engine(&model, Options());
  auto id = engine.Submit(TenantId(1), {1, 300, 301}, Greedy(100));
  ASSERT_TRUE(id.ok());
  engine.Step();
  EXPECT_GT(engine.pool().num_used_pages(), 0);
  engine.Abort(*id, absl::CancelledError("client went away"));
  EXPECT_EQ(engine.pool().num_used_pages(), 0);
  EXPECT_EQ(engine.Get(*id)->state.finish_reason(), FinishReason::kAbort);
  EXPECT_EQ(engine.Get(*id)->state.abort_status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_FALSE(engine.has_work());
}

TEST(EngineTest, SeededSamplingIsReproducibleAndBatchInvariant) {
  const Model model = DefaultModel();
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_p = 0.9f;
  s.seed = 1234;
  s.max_tokens = 30;
  auto run = [&](int others) {
    Engine engine(&model, Options());
    auto id = engine.Submit(TenantId(1), {1, 300, 301, 302}, s);
    for (int i = 0; i < others; ++i) {
      SamplingParams o = s;
      o.seed = 99 + i;
      EXPECT_TRUE(engine.Submit(TenantId(2 + i), {1, 310 + i}, o).ok());
    }
    engine.RunUntilIdle();
    return engine.Get(*id)->output;
  };
  const auto alone = run(0);
  EXPECT_EQ(alone, run(0));
  EXPECT_EQ(alone, run(7));
}

}  // namespace
}  // namespace kvcanary::engine
