// Llama models in GGUF files (engine/model/gguf_model.h): the engine's own
// files round trip, every unsupported or malformed model is a clear error,
// and stories260K.gguf runs byte for byte as stories260K.bin does.
#include "engine/model/gguf_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/engine.h"
#include "engine/model/gguf.h"
#include "engine/model/model_loader.h"
#include "engine/model/quantization.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/gguf_test_util.h"
#include "tests/engine/test_models.h"

namespace kvcanary::engine {
namespace {

using ::kvcanary::engine::testing::EraseMetadata;
using ::kvcanary::engine::testing::GgufParts;
using ::kvcanary::engine::testing::JoinGguf;
using ::kvcanary::engine::testing::MetadataValue;
using ::kvcanary::engine::testing::SplitGguf;
using ::kvcanary::engine::testing::Tensor;
using ::kvcanary::engine::testing::TinyGguf;
using ::kvcanary::engine::testing::TinyGgufModel;
using ::testing::HasSubstr;

absl::StatusOr<GgufModel> Decode(const std::string& bytes, int context = 0) {
  GgufModelOptions options;
  options.context = context;
  return DecodeGgufModel(bytes, "tiny.gguf", options);
}

absl::Status DecodeError(const GgufParts& parts) {
  return Decode(JoinGguf(parts)).status();
}

std::vector<std::vector<float> ModelWeights::*> AllTensors() {
  return {&ModelWeights::token_embedding,
          &ModelWeights::rms_att,
          &ModelWeights::wq,
          &ModelWeights::wk,
          &ModelWeights::wv,
          &ModelWeights::wo,
          &ModelWeights::rms_ffn,
          &ModelWeights::w1,
          &ModelWeights::w2,
          &ModelWeights::w3,
          &ModelWeights::rms_final,
          &ModelWeights::wcls};
}

TEST(GgufModelTest, F32FileRoundTripsExactlyWithItsTokenizer) {
  absl::StatusOr<GgufModel> m = Decode(TinyGguf());
  ASSERT_TRUE(m.ok()) << m.status();
  const Model want = TinyGgufModel();
  EXPECT_EQ(m->model.config.DebugString(), want.config.DebugString());
  EXPECT_EQ(m->recorded_context, 64);
  EXPECT_EQ(m->model.source, "tiny.gguf");
  for (auto member : AllTensors()) {
    EXPECT_EQ(m->model.weights.*member, want.weights.*member);
  }
  ASSERT_TRUE(m->tokenizer.has_value());
  const Tokenizer def = Tokenizer::Default(354);
  for (int id = 0; id < def.vocab_size(); ++id) {
    ASSERT_EQ(m->tokenizer->piece(id), def.piece(id)) << id;
    ASSERT_EQ(m->tokenizer->score(id), def.score(id)) << id;
  }
}

TEST(GgufModelTest, F16AndQ8_0StoreWhatLlamaCppWouldAndLoadClose) {
  const Model want = TinyGgufModel();
  GgufParts q8 = SplitGguf(TinyGguf(GgufWeightType::kQ8_0));
  EXPECT_EQ(Tensor(q8, "blk.0.attn_q.weight").type, gguf::TensorType::kQ8_0);
  EXPECT_EQ(Tensor(q8, "token_embd.weight").type, gguf::TensorType::kQ8_0);
  // Rows of 48 are not whole blocks of 32: F16, as llama.cpp falls back to.
  EXPECT_EQ(Tensor(q8, "blk.0.ffn_down.weight").type, gguf::TensorType::kF16);
  EXPECT_EQ(Tensor(q8, "blk.0.attn_norm.weight").type, gguf::TensorType::kF32);
  EXPECT_EQ(*q8.file.GetUint("general.file_type"), 7u);
  absl::StatusOr<GgufModel> f16 = Decode(TinyGguf(GgufWeightType::kF16));
  ASSERT_TRUE(f16.ok()) << f16.status();
  for (size_t i = 0; i < want.weights.wq.size(); ++i) {
    ASSERT_EQ(f16->model.weights.wq[i], F16ToF32(F32ToF16(want.weights.wq[i])));
  }
  EXPECT_EQ(f16->model.weights.rms_att, want.weights.rms_att);
  absl::StatusOr<GgufModel> q = Decode(TinyGguf(GgufWeightType::kQ8_0));
  ASSERT_TRUE(q.ok()) << q.status();
  // |w| < 1/sqrt(32): a Q8_0 step is at most 0.177/127.
  for (size_t i = 0; i < want.weights.wq.size(); ++i) {
    ASSERT_NEAR(q->model.weights.wq[i], want.weights.wq[i], 0.0008) << i;
  }
  EXPECT_EQ(q->model.weights.w2, f16->model.weights.w2);
}

TEST(GgufModelTest, ATiedClassifierIsWrittenAsNoneAndLoadsShared) {
  ModelConfig c = testing::TinyGgufConfig();
  c.shared_classifier = true;
  const Model tied = SyntheticModel(c, 5);
  const std::string bytes =
      testing::EncodeGguf(tied, nullptr, GgufWeightType::kF32);
  EXPECT_EQ(gguf::File::Decode(bytes)->FindTensor("output.weight"), nullptr);
  absl::StatusOr<GgufModel> m = Decode(bytes);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->model.config.shared_classifier);
  EXPECT_TRUE(m->model.weights.wcls.empty());
  EXPECT_FALSE(m->tokenizer.has_value());
}

TEST(GgufModelTest, AnotherArchitectureIsUnimplemented) {
  GgufParts parts = SplitGguf(TinyGguf());
  MetadataValue(parts, "general.architecture").string = "gpt2";
  absl::Status s = DecodeError(parts);
  EXPECT_TRUE(absl::IsUnimplemented(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("tiny.gguf: architecture 'gpt2' is not supported"));
}

TEST(GgufModelTest, AMissingKeyIsNamed) {
  for (const char* key :
       {"general.architecture", "llama.block_count", "llama.context_length",
        "llama.embedding_length", "llama.attention.layer_norm_rms_epsilon"}) {
    GgufParts parts = SplitGguf(TinyGguf());
    EraseMetadata(parts, key);
    absl::Status s = DecodeError(parts);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("missing metadata key '", key, "'")));
  }
  GgufParts parts = SplitGguf(TinyGguf());
  MetadataValue(parts, "llama.block_count") = gguf::Value::String("2");
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("'llama.block_count' is string, expected an integer"));
}

TEST(GgufModelTest, ATensorOfTheWrongShapeIsNamedWithBothShapes) {
  GgufParts parts = SplitGguf(TinyGguf());
  Tensor(parts, "blk.1.attn_k.weight").dims = {16, 32};  // same size
  absl::Status s = DecodeError(parts);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("tensor 'blk.1.attn_k.weight' has shape "
                                     "[16, 32], expected [32, 16]"));
  parts = SplitGguf(TinyGguf());
  MetadataValue(parts, "llama.attention.head_count_kv") =
      gguf::Value::Uint32(4);
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("'blk.0.attn_k.weight' has shape [32, 16], expected "
                        "[32, 32]"));
}

TEST(GgufModelTest, MissingAndExtraTensorsAreNamed) {
  GgufParts parts = SplitGguf(TinyGguf());
  parts.file.tensors.pop_back();
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("missing tensor 'blk.1.ffn_norm.weight'"));
  parts = SplitGguf(TinyGguf());
  Tensor(parts, "blk.1.ffn_norm.weight").name = "rope_freqs.weight";
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("tensor 'rope_freqs.weight' is not part of a llama "
                        "model"));
  parts = SplitGguf(TinyGguf());
  Tensor(parts, "token_embd.weight").name = "tok_embeddings.weight";
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("missing tensor 'token_embd.weight'"));
}

TEST(GgufModelTest, ANonFiniteWeightIsDataLoss) {
  GgufParts parts = SplitGguf(TinyGguf());
  const gguf::TensorInfo& t = Tensor(parts, "blk.0.attn_output.weight");
  const float nan = std::nanf("");
  std::memcpy(parts.data.data() + t.offset + 4 * 7, &nan, 4);
  absl::Status s = DecodeError(parts);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("non-finite weight in blk.0.attn_output.weight at "
                        "index 7"));
}

TEST(GgufModelTest, WhatTheKernelsDoNotRunIsUnimplemented) {
  const std::pair<const char*, gguf::Value> cases[] = {
      {"llama.rope.freq_base", gguf::Value::Float32(500000.0f)},
      {"llama.attention.layer_norm_rms_epsilon", gguf::Value::Float32(1e-6f)},
      {"llama.rope.dimension_count", gguf::Value::Uint32(4)},
      {"llama.expert_count", gguf::Value::Uint32(8)},
      {"llama.rope.scaling.type", gguf::Value::String("yarn")},
      {"llama.rope.scaling.factor", gguf::Value::Float32(4.0f)},
  };
  for (const auto& [key, value] : cases) {
    GgufParts parts = SplitGguf(TinyGguf());
    parts.file.metadata.erase(
        std::remove_if(parts.file.metadata.begin(), parts.file.metadata.end(),
                       [&](const auto& kv) { return kv.first == key; }),
        parts.file.metadata.end());
    parts.file.metadata.push_back({key, value});
    absl::Status s = DecodeError(parts);
    EXPECT_TRUE(absl::IsUnimplemented(s)) << key << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(key));
  }
}

TEST(GgufModelTest, ATokenizerTheEngineCannotUseIsRefused) {
  GgufParts parts = SplitGguf(TinyGguf());
  MetadataValue(parts, "tokenizer.ggml.model").string = "gpt2";
  EXPECT_TRUE(absl::IsUnimplemented(DecodeError(parts)));
  parts = SplitGguf(TinyGguf());
  MetadataValue(parts, "tokenizer.ggml.bos_token_id") = gguf::Value::Uint32(5);
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("tokenizer.ggml.bos_token_id is 5"));
  parts = SplitGguf(TinyGguf());
  std::swap(MetadataValue(parts, "tokenizer.ggml.tokens").strings[3],
            MetadataValue(parts, "tokenizer.ggml.tokens").strings[4]);
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("token 3 is not the byte token <0x00>"));
  parts = SplitGguf(TinyGguf());
  MetadataValue(parts, "tokenizer.ggml.tokens").strings.pop_back();
  EXPECT_THAT(DecodeError(parts).message(),
              HasSubstr("353 tokens, but the model's vocabulary is 354"));
  parts = SplitGguf(TinyGguf());
  MetadataValue(parts, "tokenizer.ggml.scores").numbers.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeError(parts)));
}

TEST(GgufModelTest, TheContextIsTheRecordedOneUnlessAsked) {
  absl::StatusOr<GgufModel> m = Decode(TinyGguf(), 300);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->model.config.seq_len, 300);
  EXPECT_EQ(m->recorded_context, 64);
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(TinyGguf(), -1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Decode(TinyGguf(), 1 << 21).status()));
}

TEST(GgufModelTest, FilesAreWrittenAndLoadedByPath) {
  const std::string path = absl::StrCat(::testing::TempDir(),
                                        "/gguf_model_test_", getpid(), ".gguf");
  const Model model = TinyGgufModel();
  ASSERT_TRUE(WriteGgufModel(model, nullptr, GgufWeightType::kQ8_0, path).ok());
  absl::StatusOr<GgufModel> m = LoadGgufModel(path, {});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->model.source, path);
  absl::StatusOr<LoadedModel> loaded = LoadModelAndTokenizer({path, "", 0});
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("has no tokenizer.ggml.tokens"));
  std::remove(path.c_str());
  EXPECT_TRUE(absl::IsNotFound(LoadGgufModel(path, {}).status()));
  Model huge = model;
  huge.weights.w2[3] = 70000.0f;
  absl::Status s = WriteGgufModel(huge, nullptr, GgufWeightType::kF16, path);
  EXPECT_THAT(s.message(), HasSubstr("beyond the F16 range"));
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

// --- stories260K ---------------------------------------------------------

std::string SharedModel(const std::string& name) {
  return testing::SharedDir() + "/models/" + name;
}

#define KVC_REQUIRE_STORIES260K_GGUF(real)       \
  KVC_REQUIRE_SHARED("models/stories260K.gguf"); \
  KVC_REQUIRE_STORIES260K(real)

TEST(GgufStories260KTest, HoldsTheBinsWeightsAndTok512) {
  KVC_REQUIRE_STORIES260K_GGUF(real);
  absl::StatusOr<GgufModel> m =
      LoadGgufModel(SharedModel("stories260K.gguf"), {});
  ASSERT_TRUE(m.ok()) << m.status();
  ModelConfig want = Stories260KConfig();
  want.seq_len = 128;  // what the file records
  EXPECT_EQ(m->model.config.DebugString(), want.DebugString());
  // output.weight is token_embd.weight again: the classifier is shared.
  for (auto member : AllTensors()) {
    EXPECT_EQ(m->model.weights.*member, real->model.weights.*member);
  }
  ASSERT_TRUE(m->tokenizer.has_value());
  for (int id = 0; id < 512; ++id) {
    ASSERT_EQ(m->tokenizer->piece(id), real->tokenizer.piece(id)) << id;
    ASSERT_EQ(m->tokenizer->score(id), real->tokenizer.score(id)) << id;
  }
}

// llama2.c's run -n N: N positions, BOS and the prompt included; the
// prompt's and the generated tokens printed as run does.
std::string RunLikeReference(const Model& model, const Tokenizer& tokenizer,
                             const std::string& prompt, int positions) {
  EngineOptions options;
  options.scheduler.max_batch_seqs = 1;
  Engine engine(&model, options);
  const std::vector<int> ids = tokenizer.Encode(prompt, true, false);
  SamplingParams greedy;
  greedy.max_tokens = positions - static_cast<int>(ids.size()) + 1;
  absl::StatusOr<RequestId> id = engine.Submit(TenantId(1), ids, greedy);
  EXPECT_TRUE(id.ok()) << id.status();
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(*id);
  std::vector<int> all(seq.prompt.begin() + 1, seq.prompt.end());
  all.insert(all.end(), seq.output.begin(), seq.output.end());
  return tokenizer.DecodeAll(kBosToken, all) + "\n";
}

// The must-show test: greedy output from the GGUF file, with its
// own weights and tokenizer, equals stories260K.bin + tok512.bin's byte for
// byte at the same context, and the reference goldens.
TEST(GgufStories260KTest, GreedyOutputIsByteExactWithTheBinAtTheSameContext) {
  KVC_REQUIRE_STORIES260K_GGUF(real);
  for (const int context : {512, 128}) {
    absl::StatusOr<LoadedModel> gguf =
        LoadModelAndTokenizer({SharedModel("stories260K.gguf"), "", context});
    absl::StatusOr<LoadedModel> bin = LoadModelAndTokenizer(
        {SharedModel("stories260K.bin"), SharedModel("tok512.bin"), context});
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    ASSERT_TRUE(bin.ok()) << bin.status();
    EXPECT_EQ(gguf->note.empty(), context == 128);
    for (const char* prompt :
         {"Once upon a time", "", "Lily and Ben went to the park",
          "Café ☕ \"quoted\"\n\ttabs"}) {
      const std::string from_gguf =
          RunLikeReference(gguf->model, gguf->tokenizer, prompt, context);
      EXPECT_EQ(from_gguf,
                RunLikeReference(bin->model, bin->tokenizer, prompt, context))
          << "context " << context << ", prompt '" << prompt << "'";
      EXPECT_GT(from_gguf.size(), 100u);
    }
  }
  absl::StatusOr<LoadedModel> gguf =
      LoadModelAndTokenizer({SharedModel("stories260K.gguf"), "", 512});
  ASSERT_TRUE(gguf.ok());
  KVC_REQUIRE_SHARED("golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt",
                     "golden/stories260K_t0_n200_noprompt.txt");
  const auto once = testing::ReadFile(
      testing::SharedDir() +
      "/golden/stories260K_t0_n256_prompt_Once_upon_a_time.txt");
  const auto empty = testing::ReadFile(
      testing::SharedDir() + "/golden/stories260K_t0_n200_noprompt.txt");
  ASSERT_TRUE(once && empty);
  EXPECT_EQ(
      RunLikeReference(gguf->model, gguf->tokenizer, "Once upon a time", 256),
      *once);
  EXPECT_EQ(RunLikeReference(gguf->model, gguf->tokenizer, "", 200), *empty);
}

TEST(GgufStories260KTest, TheBinCannotRunPastItsTrainedContext) {
  KVC_REQUIRE_STORIES260K_GGUF(real);
  absl::StatusOr<LoadedModel> bin = LoadModelAndTokenizer(
      {SharedModel("stories260K.bin"), SharedModel("tok512.bin"), 513});
  EXPECT_TRUE(absl::IsInvalidArgument(bin.status())) << bin.status();
  EXPECT_THAT(bin.status().message(), HasSubstr("outside [1, 512]"));
  absl::StatusOr<LoadedModel> gguf =
      LoadModelAndTokenizer({SharedModel("stories260K.gguf"), "", 0});
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_EQ(gguf->model.config.seq_len, 128);
  EXPECT_TRUE(gguf->note.empty());
  EXPECT_THAT(LoadModelAndTokenizer({SharedModel("stories260K.bin"), "", 0})
                  .status()
                  .message(),
              HasSubstr("needs a tokenizer file"));
}

}  // namespace
}  // namespace kvcanary::engine
