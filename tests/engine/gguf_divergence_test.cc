// How far a quantized GGUF model the engine writes itself from
// stories260K.bin drifts from the f32 model (docs/gguf.md, "Divergence"):
// along the f32 model's greedy path, the top-1 agreement of each position's
// next-token choice and the largest logit difference; then free-running
// greedy text, and the files' sizes and load times. Prints the figures and
// holds them to bounds.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/engine.h"
#include "engine/core/model_runner.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model_loader.h"
#include "gtest/gtest.h"
#include "kernels/thread_pool.h"
#include "tests/engine/test_models.h"

namespace kvcanary::engine {
namespace {

constexpr int kContext = 512;

// The logits after each position of `tokens` (row p predicts token p + 1),
// one decode step at a time through the engine's model runner.
std::vector<std::vector<float>> TeacherForcedLogits(
    const Model& model, const std::vector<int>& tokens) {
  EngineOptions options;
  options.scheduler.max_batch_seqs = 1;
  PagePool pool(PoolOptionsFor(model.config, options));
  kernels::ThreadPool threads(1);
  ModelRunner runner(&model, &pool, &threads, ModelRunnerOptions{});
  Sequence seq(RequestId(1), TenantId(1), tokens, SamplingParams{});
  seq.block_table = pool.Allocate(
      seq.tenant, seq.id, pool.PagesFor(static_cast<int>(tokens.size())));
  std::vector<std::vector<float>> logits;
  for (int pos = 0; pos < static_cast<int>(tokens.size()); ++pos) {
    Batch batch;
    batch.entries.push_back({&seq, pos, 1});
    StepOutput out = runner.Run(batch);
    logits.push_back(std::move(out.logits));
    seq.num_computed = pos + 1;
  }
  return logits;
}

// BOS, the prompt and the greedy continuation to `positions` positions.
std::vector<int> GreedyTokens(const LoadedModel& m, const std::string& prompt,
                              int positions) {
  EngineOptions options;
  options.scheduler.max_batch_seqs = 1;
  Engine engine(&m.model, options);
  std::vector<int> ids = m.tokenizer.Encode(prompt, true, false);
  SamplingParams greedy;
  greedy.max_tokens = positions - static_cast<int>(ids.size()) + 1;
  const RequestId id = *engine.Submit(TenantId(1), ids, greedy);
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(id);
  ids.insert(ids.end(), seq.output.begin(), seq.output.end());
  return ids;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

struct Divergence {
  int positions = 0;
  int top1_agree = 0;
  double max_logit_diff = 0;
  double sum_abs_diff = 0;
  size_t logits = 0;
  int free_running_same = 0;  // generated tokens equal before the first miss
  int free_running_total = 0;
  double max_abs_logit = 0;  // f32's, for scale
  // Where the choices differ: f32's own margin between its top two.
  double max_margin_at_miss = 0;
  std::vector<std::string> per_prompt;
};

// f32's top logit minus its second.
double TopTwoMargin(std::vector<float> v) {
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return double{v[0]} - v[1];
}

void AddPath(const LoadedModel& f32, const LoadedModel& q,
             const std::vector<int>& path, int prompt_tokens, Divergence* d) {
  // The last token predicts nothing here (it may sit past the context).
  const std::vector<int> fed(path.begin(), path.end() - 1);
  const auto ref = TeacherForcedLogits(f32.model, fed);
  const auto got = TeacherForcedLogits(q.model, fed);
  // Every position from the prompt's last token predicts a generated token.
  for (size_t p = prompt_tokens - 1; p + 1 < path.size(); ++p) {
    ++d->positions;
    if (Argmax(ref[p]) == Argmax(got[p])) {
      ++d->top1_agree;
    } else {
      d->max_margin_at_miss =
          std::max(d->max_margin_at_miss, TopTwoMargin(ref[p]));
    }
    for (size_t v = 0; v < ref[p].size(); ++v) {
      d->max_abs_logit =
          std::max(d->max_abs_logit, std::fabs(double{ref[p][v]}));
      const double diff = std::fabs(double{ref[p][v]} - got[p][v]);
      d->max_logit_diff = std::max(d->max_logit_diff, diff);
      d->sum_abs_diff += diff;
      ++d->logits;
    }
  }
}

Divergence Measure(const LoadedModel& f32, const LoadedModel& q) {
  Divergence d;
  for (const char* prompt :
       {"Once upon a time", "", "Lily and Ben went to the park",
        "The little dog was sad because"}) {
    const std::vector<int> path = GreedyTokens(f32, prompt, kContext);
    const int prompt_tokens =
        static_cast<int>(f32.tokenizer.Encode(prompt, true, false).size());
    AddPath(f32, q, path, prompt_tokens, &d);
    const std::vector<int> free = GreedyTokens(q, prompt, kContext);
    const size_t n = std::min(path.size(), free.size());
    size_t same = prompt_tokens;
    while (same < n && path[same] == free[same]) ++same;
    d.free_running_same += static_cast<int>(same) - prompt_tokens;
    d.free_running_total += static_cast<int>(path.size()) - prompt_tokens;
    d.per_prompt.push_back(absl::StrCat(
        "  '", prompt, "': free-running, ", same - prompt_tokens, " of ",
        path.size() - prompt_tokens, " generated tokens equal"));
  }
  return d;
}

std::string TempModel(const char* name) {
  return absl::StrCat(::testing::TempDir(), "/gguf_divergence_", getpid(), "_",
                      name, ".gguf");
}

long FileBytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return -1;
  std::fseek(f, 0, SEEK_END);
  const long n = std::ftell(f);
  std::fclose(f);
  return n;
}

// Loads `path` three times and returns the fastest, in milliseconds.
double LoadMs(const ModelLoadOptions& options, LoadedModel* out) {
  double best = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<LoadedModel> m = LoadModelAndTokenizer(options);
    const auto end = std::chrono::steady_clock::now();
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return -1;
    best = std::min(
        best, std::chrono::duration<double, std::milli>(end - start).count());
    *out = *std::move(m);
  }
  return best;
}

TEST(GgufDivergenceTest, Q8_0AndF16StayCloseToF32OnStories260K) {
  KVC_REQUIRE_STORIES260K(real);
  const std::string models = testing::SharedDir() + "/models/";
  LoadedModel f32{real->model, real->tokenizer, ""};
  const double bin_ms = LoadMs(
      {models + "stories260K.bin", models + "tok512.bin", kContext}, &f32);
  // top-1: positions whose next-token choice matches f32's, along f32's
  // greedy paths; |dl|: logit differences there; free-run: generated
  // tokens equal to f32's before the first difference, summed over prompts.
  std::printf("%-20s %9s %8s %11s %9s %10s %11s\n", "model", "file B",
              "load ms", "top-1", "max |dl|", "mean |dl|", "free-run");
  std::printf("%-20s %9ld %8.2f\n", "stories260K.bin f32",
              FileBytes(models + "stories260K.bin"), bin_ms);
  for (const auto& [name, type, min_agree, max_diff] :
       {std::tuple{"f16", GgufWeightType::kF16, 0.99, 0.05},
        std::tuple{"q8_0", GgufWeightType::kQ8_0, 0.95, 0.5}}) {
    const std::string path = TempModel(name);
    ASSERT_TRUE(WriteGgufModel(real->model, &real->tokenizer, type, path).ok());
    LoadedModel q{real->model, real->tokenizer, ""};
    const double ms = LoadMs({path, "", kContext}, &q);
    const Divergence d = Measure(f32, q);
    const double agree = static_cast<double>(d.top1_agree) / d.positions;
    std::printf("%-20s %9ld %8.2f %5d/%-5d %9.4f %10.5f %5d/%-5d\n",
                absl::StrCat("written ", name).c_str(), FileBytes(path), ms,
                d.top1_agree, d.positions, d.max_logit_diff,
                d.sum_abs_diff / d.logits, d.free_running_same,
                d.free_running_total);
    for (const std::string& line : d.per_prompt) {
      std::printf("%s\n", line.c_str());
    }
    std::printf(
        "  f32 logits within +-%.2f; f32's top-two margin where the "
        "choices differ: at most %.4f\n",
        d.max_abs_logit, d.max_margin_at_miss);
    EXPECT_GE(agree, min_agree) << name;
    EXPECT_LE(d.max_logit_diff, max_diff) << name;
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace kvcanary::engine
