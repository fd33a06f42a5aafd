#include "engine/model/model.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/shared_files.h"

namespace kvcanary::engine {
namespace {

using ::testing::HasSubstr;

const std::string kRealModel = shared_files::Path("models/stories260K.bin");

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/model_test_", getpid(), "_",
                      name);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string Header(const std::vector<int32_t>& fields) {
  std::string bytes(fields.size() * 4, '\0');
  std::memcpy(bytes.data(), fields.data(), bytes.size());
  return bytes;
}

// A small valid shape: head_dim 4, grouped-query attention.
ModelConfig TinyConfig(bool shared) {
  ModelConfig c;
  c.dim = 8;
  c.hidden_dim = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 16;
  c.seq_len = 8;
  c.shared_classifier = shared;
  return c;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

void ExpectSameWeights(const ModelWeights& a, const ModelWeights& b) {
  EXPECT_TRUE(SameBits(a.token_embedding, b.token_embedding));
  EXPECT_TRUE(SameBits(a.rms_att, b.rms_att));
  EXPECT_TRUE(SameBits(a.wq, b.wq));
  EXPECT_TRUE(SameBits(a.wk, b.wk));
  EXPECT_TRUE(SameBits(a.wv, b.wv));
  EXPECT_TRUE(SameBits(a.wo, b.wo));
  EXPECT_TRUE(SameBits(a.rms_ffn, b.rms_ffn));
  EXPECT_TRUE(SameBits(a.w1, b.w1));
  EXPECT_TRUE(SameBits(a.w2, b.w2));
  EXPECT_TRUE(SameBits(a.w3, b.w3));
  EXPECT_TRUE(SameBits(a.rms_final, b.rms_final));
  EXPECT_TRUE(SameBits(a.wcls, b.wcls));
}

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.DebugString(), b.DebugString());
}

TEST(ModelTest, RealStories260KLoadsWithExpectedConfig) {
  KVC_REQUIRE_SHARED("models/stories260K.bin");
  absl::StatusOr<Model> model = LoadLlama2cModel(kRealModel);
  ASSERT_TRUE(model.ok()) << model.status();
  ExpectSameConfig(model->config, Stories260KConfig());
  EXPECT_EQ(model->source, kRealModel);
  EXPECT_EQ(model->weights.token_embedding.size(), 512u * 64);
  EXPECT_EQ(model->weights.wk.size(), 5u * 32 * 64);
  EXPECT_EQ(model->weights.w2.size(), 5u * 64 * 172);
  EXPECT_EQ(model->weights.rms_final.size(), 64u);
  EXPECT_TRUE(model->weights.wcls.empty());
  EXPECT_EQ(model->weights.classifier(), model->weights.token_embedding.data());

  const std::string bytes = ReadBytes(kRealModel);
  ASSERT_EQ(bytes.size(), 1056540u);
  EXPECT_EQ(
      std::memcmp(&model->weights.token_embedding[0], bytes.data() + 28, 4), 0);
  // rms_final is the last tensor before the two RoPE tables.
  const size_t rope_bytes = 2 * 512 * 4 * 4;
  EXPECT_EQ(std::memcmp(&model->weights.rms_final[63],
                        bytes.data() + bytes.size() - rope_bytes - 4, 4),
            0);
}

TEST(ModelTest, RealStories260KRewritesToTheSameFile) {
  KVC_REQUIRE_SHARED("models/stories260K.bin");
  absl::StatusOr<Model> model = LoadLlama2cModel(kRealModel);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string path = TempPath("rewrite.bin");
  ASSERT_TRUE(WriteLlama2cModel(*model, path).ok());
  const std::string original = ReadBytes(kRealModel);
  const std::string rewritten = ReadBytes(path);
  ASSERT_EQ(rewritten.size(), original.size());
  // Header and weights are bit-identical; the RoPE tables (recomputed, not
  // stored) agree with llama2.c's export to float rounding.
  const size_t rope_floats = 2 * 512 * 4;
  const size_t rope_start = original.size() - rope_floats * 4;
  EXPECT_EQ(original.compare(0, rope_start, rewritten, 0, rope_start), 0);
  for (size_t i = 0; i < rope_floats; ++i) {
    float a, b;
    std::memcpy(&a, original.data() + rope_start + 4 * i, 4);
    std::memcpy(&b, rewritten.data() + rope_start + 4 * i, 4);
    ASSERT_NEAR(a, b, 1e-5) << "RoPE float " << i;
  }
  std::remove(path.c_str());
}

TEST(ModelTest, SyntheticWriteLoadRoundTripIsBitwise) {
  const Model model = SyntheticModel(Stories260KConfig(), 42);
  const std::string path = TempPath("roundtrip.bin");
  ASSERT_TRUE(WriteLlama2cModel(model, path).ok());
  EXPECT_EQ(ReadBytes(path).size(), 1056540u);
  absl::StatusOr<Model> loaded = LoadLlama2cModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameConfig(loaded->config, model.config);
  ExpectSameWeights(loaded->weights, model.weights);
  EXPECT_EQ(loaded->source, path);
  std::remove(path.c_str());
}

TEST(ModelTest, NonSharedClassifierRoundTrips) {
  const Model model = SyntheticModel(TinyConfig(/*shared=*/false), 7);
  ASSERT_EQ(model.weights.wcls.size(), 16u * 8);
  EXPECT_EQ(model.weights.classifier(), model.weights.wcls.data());
  const std::string path = TempPath("nonshared.bin");
  ASSERT_TRUE(WriteLlama2cModel(model, path).ok());
  const std::string bytes = ReadBytes(path);
  int32_t vocab;
  std::memcpy(&vocab, bytes.data() + 20, 4);
  EXPECT_EQ(vocab, -16);
  absl::StatusOr<Model> loaded = LoadLlama2cModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->config.shared_classifier);
  EXPECT_EQ(loaded->config.vocab_size, 16);
  ExpectSameWeights(loaded->weights, model.weights);
  std::remove(path.c_str());
}

TEST(ModelTest, SyntheticIsDeterministicPerSeed) {
  const Model a = SyntheticModel(TinyConfig(true), 1234);
  const Model b = SyntheticModel(TinyConfig(true), 1234);
  const Model c = SyntheticModel(TinyConfig(true), 1235);
  ExpectSameWeights(a.weights, b.weights);
  EXPECT_EQ(a.source, "synthetic:1234");
  EXPECT_FALSE(SameBits(a.weights.token_embedding, c.weights.token_embedding));
  EXPECT_FALSE(SameBits(a.weights.wq, c.weights.wq));
  EXPECT_FALSE(SameBits(a.weights.rms_final, c.weights.rms_final));
}

TEST(ModelTest, SyntheticFollowsTheDocumentedSplitMix64Stream) {
  // SplitMix64 from state 0 yields 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4.
  const Model m = SyntheticModel(TinyConfig(true), 0);
  const float first = static_cast<float>(
      static_cast<double>(0xe220a8397b1dcdafull >> 40) * 0x1p-24 * 2.0 - 1.0);
  const float second = static_cast<float>(
      static_cast<double>(0x6e789e6aa1b965f4ull >> 40) * 0x1p-24 * 2.0 - 1.0);
  EXPECT_EQ(m.weights.token_embedding[0], first);
  EXPECT_EQ(m.weights.token_embedding[1], second);
}

TEST(ModelTest, SyntheticValuesAreInTheirRanges) {
  const ModelConfig config = Stories260KConfig();
  const Model m = SyntheticModel(config, kDefaultModelSeed);
  auto in_range = [](const std::vector<float>& v, float lo, float hi) {
    for (float x : v) {
      if (!(x >= lo && x <= hi)) return false;
    }
    return !v.empty();
  };
  const float a_dim = 1.0f / std::sqrt(64.0f) + 1e-6f;
  const float a_hidden = 1.0f / std::sqrt(172.0f) + 1e-6f;
  EXPECT_TRUE(in_range(m.weights.token_embedding, -1.0f, 1.0f));
  EXPECT_TRUE(in_range(m.weights.rms_att, 0.9f, 1.1f));
  EXPECT_TRUE(in_range(m.weights.rms_ffn, 0.9f, 1.1f));
  EXPECT_TRUE(in_range(m.weights.rms_final, 0.9f, 1.1f));
  EXPECT_TRUE(in_range(m.weights.wq, -a_dim, a_dim));
  EXPECT_TRUE(in_range(m.weights.w1, -a_dim, a_dim));
  EXPECT_TRUE(in_range(m.weights.w2, -a_hidden, a_hidden));
  // w2 uses its own (smaller) scale: some value exceeds 1/sqrt(172)/2.
  bool big = false;
  for (float x : m.weights.w2) big |= std::fabs(x) > a_hidden / 2;
  EXPECT_TRUE(big);
}

TEST(ModelTest, DefaultModelHasTheStories260KShapeWithItsOwnClassifier) {
  const Model m = DefaultModel();
  ModelConfig want = Stories260KConfig();
  want.shared_classifier = false;
  ExpectSameConfig(m.config, want);
  ExpectSameConfig(DefaultModelConfig(), want);
  EXPECT_EQ(m.source, absl::StrCat("synthetic:", kDefaultModelSeed));
  ExpectSameWeights(m.weights, SyntheticModel(want, kDefaultModelSeed).weights);
  EXPECT_EQ(m.weights.wcls.size(),
            static_cast<size_t>(want.vocab_size) * want.dim);
}

TEST(ModelTest, Stories15MShapeGeneratesQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const Model m = SyntheticModel(Stories15MShapeConfig(), 1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(m.weights.token_embedding.size(), 32000u * 288);
  EXPECT_EQ(m.weights.w1.size(), 6u * 768 * 288);
  // Generous bound (sanitizer and debug builds); release takes ~0.1 s.
  EXPECT_LT(seconds, 5.0);
}

TEST(ModelConfigTest, ValidateNamesTheOffendingField) {
  EXPECT_TRUE(Stories260KConfig().Validate().ok());
  EXPECT_TRUE(Stories15MShapeConfig().Validate().ok());
  struct Case {
    void (*mutate)(ModelConfig&);
    const char* field;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.dim = 0; }, "dim"},
      {[](ModelConfig& c) { c.dim = 16384 * 2; }, "dim"},
      {[](ModelConfig& c) { c.hidden_dim = -1; }, "hidden_dim"},
      {[](ModelConfig& c) { c.n_layers = 257; }, "n_layers"},
      {[](ModelConfig& c) { c.n_heads = 0; }, "n_heads"},
      {[](ModelConfig& c) { c.n_heads = 7; }, "n_heads must divide dim"},
      {[](ModelConfig& c) { c.n_kv_heads = 16; }, "n_kv_heads"},
      {[](ModelConfig& c) { c.n_kv_heads = 3; }, "n_kv_heads must divide"},
      {[](ModelConfig& c) { c.vocab_size = (1 << 20) + 1; }, "vocab_size"},
      {[](ModelConfig& c) { c.seq_len = 0; }, "seq_len"},
      {[](ModelConfig& c) {
         c.n_heads = 64;
         c.n_kv_heads = 1;
       },
       "head_dim"},
  };
  for (const Case& test : cases) {
    ModelConfig c = Stories260KConfig();
    test.mutate(c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.DebugString();
    EXPECT_THAT(std::string(s.message()), HasSubstr(test.field))
        << c.DebugString();
  }
}

// Corrupt files: each gives a non-OK status naming the path, and none of them
// crashes or allocates the size the header claims.
class ModelLoadErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    const std::string good = TempPath("good.bin");
    ASSERT_TRUE(
        WriteLlama2cModel(SyntheticModel(TinyConfig(true), 3), good).ok());
    good_ = ReadBytes(good);
    std::remove(good.c_str());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  absl::Status LoadBytes(const std::string& bytes) {
    WriteBytes(path_, bytes);
    absl::StatusOr<Model> m = LoadLlama2cModel(path_);
    EXPECT_FALSE(m.ok());
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(path_));
    return m.status();
  }

  std::string path_;
  std::string good_;  // a valid TinyConfig checkpoint
};

TEST_F(ModelLoadErrorTest, MissingFileIsNotFound) {
  absl::StatusOr<Model> m = LoadLlama2cModel(path_ + ".does-not-exist");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr(path_ + ".does-not-exist"));
}

TEST_F(ModelLoadErrorTest, DirectoryIsRejected) {
  absl::StatusOr<Model> m = LoadLlama2cModel(::testing::TempDir());
  EXPECT_FALSE(m.ok());
}

TEST_F(ModelLoadErrorTest, EmptyFileIsTruncated) {
  const absl::Status s = LoadBytes("");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated"));
}

TEST_F(ModelLoadErrorTest, HeaderOnlyIsTruncated) {
  const absl::Status s = LoadBytes(good_.substr(0, 28));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("truncated: expected ", good_.size(),
                                     " bytes, file has 28")));
}

TEST_F(ModelLoadErrorTest, TruncatedByOneByte) {
  const absl::Status s = LoadBytes(good_.substr(0, good_.size() - 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("truncated: expected ", good_.size(),
                                     " bytes, file has ", good_.size() - 1)));
}

TEST_F(ModelLoadErrorTest, OneTrailingByte) {
  const absl::Status s = LoadBytes(good_ + "x");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("trailing"));
}

TEST_F(ModelLoadErrorTest, NaNWeightNamesTheTensor) {
  // The first wq float: after the header, token_embedding and rms_att.
  const size_t offset = 28 + 4 * (16 * 8 + 2 * 8);
  std::string bytes = good_;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + offset, &nan, 4);
  const absl::Status s = LoadBytes(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("non-finite weight in wq"));
}

TEST_F(ModelLoadErrorTest, InfinityInLastTensorIsRejected) {
  std::string bytes = good_;
  const size_t rope_bytes = 2 * 8 * 2 * 4;
  const float inf = -std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data() + bytes.size() - rope_bytes - 4, &inf, 4);
  const absl::Status s = LoadBytes(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("rms_final"));
}

TEST_F(ModelLoadErrorTest, NegativeDimIsInvalid) {
  const absl::Status s =
      LoadBytes(Header({-8, 16, 2, 2, 1, 16, 8}) + good_.substr(28));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dim"));
}

TEST_F(ModelLoadErrorTest, NHeadsNotDividingDimIsInvalid) {
  const absl::Status s =
      LoadBytes(Header({8, 16, 2, 3, 1, 16, 8}) + good_.substr(28));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("n_heads"));
}

TEST_F(ModelLoadErrorTest, AbsurdlyLargeDimsAreRejectedWithoutAllocating) {
  // Out of every range.
  absl::Status s = LoadBytes(Header({INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX,
                                     INT32_MAX, INT32_MIN, INT32_MAX}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // Each field in range, but together more than 1 TiB.
  s = LoadBytes(Header({16384, 65536, 256, 128, 128, -(1 << 20), 1 << 20}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("limit"));
  // Under the limit, but far larger than the file: truncated, not allocated.
  s = LoadBytes(Header({16384, 65536, 16, 128, 128, 1 << 20, 1 << 20}));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated"));
}

TEST_F(ModelLoadErrorTest, RandomHeadersNeverCrash) {
  // A deterministic mini-fuzz: random header fields (mostly small, sometimes
  // extreme) in front of the good body. Each load fails cleanly or, if the
  // header happens to match the body, succeeds.
  uint64_t state = 99;
  auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<int32_t> header = {8, 16, 2, 2, 1, 16, 8};
    for (int32_t& f : header) {
      switch (next() % 4) {
        case 0:
          break;
        case 1:
          f = static_cast<int32_t>(next() % 40) - 8;
          break;
        case 2:
          f = static_cast<int32_t>(next());
          break;
        default:
          f = -f;
          break;
      }
    }
    WriteBytes(path_, Header(header) + good_.substr(28));
    absl::StatusOr<Model> m = LoadLlama2cModel(path_);
    if (!m.ok()) {
      EXPECT_THAT(std::string(m.status().message()), HasSubstr(path_));
    }
  }
}

TEST(ModelWriteTest, ErrorsAreStatuses) {
  Model m = SyntheticModel(TinyConfig(true), 5);
  const std::string bad_dir = TempPath("no-such-dir") + "/model.bin";
  EXPECT_FALSE(WriteLlama2cModel(m, bad_dir).ok());

  m.weights.wq.pop_back();
  const absl::Status s = WriteLlama2cModel(m, TempPath("short.bin"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("wq"));

  Model bad_config = SyntheticModel(TinyConfig(true), 5);
  bad_config.config.n_heads = 3;
  EXPECT_EQ(WriteLlama2cModel(bad_config, TempPath("bad.bin")).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvcanary::engine
