// kvcanary-bench: engine throughput on stories260K and on the 15M shape.
//
//   build/bin/kvcanary-bench [--threads N] [--models 260k,15m] [--reps R]
//
// Prints one table: prefill tok/s, single-stream decode tok/s, batched
// decode aggregate tok/s at 1/8/32 sequences, and the watermark check's cost
// (decode with stamp checks `off` vs `enforce`, interleaved in the same run,
// best of --reps each). Ratios are measured side by side because the machines
// are noisy.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/core/engine.h"
#include "engine/model/model.h"
#include "kernels/paged_attention.h"

ABSL_FLAG(int, threads, 1, "kernel threads, including the engine thread");
ABSL_FLAG(std::string, models, "260k,15m", "models to measure: 260k, 15m");
ABSL_FLAG(std::string, batch_sizes, "8,32",
          "batched decode sizes to measure (empty: none)");
ABSL_FLAG(int, reps, 5, "repetitions per figure (best is reported)");
ABSL_FLAG(std::string, shared_dir, "../shared",
          "where models/stories260K.bin lives");

namespace kvcanary::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Setup {
  std::string name;
  Model model;
  int decode_positions;  // context length a decode run grows to
  int prefill_tokens;
};

EngineOptions Options(WatermarkMode mode, int max_seqs) {
  EngineOptions o;
  o.num_threads = absl::GetFlag(FLAGS_threads);
  o.watermark = mode;
  o.scheduler.max_batch_seqs = max_seqs;
  o.scheduler.max_prefill_tokens = 1 << 20;
  return o;
}

std::vector<int> Prompt(int n, int vocab, int salt) {
  std::vector<int> p = {1};
  for (int i = 1; i < n; ++i)
    p.push_back(3 + (i * 37 + salt * 101) % (vocab - 3));
  return p;
}

// Prefill tok/s: one sequence, one step for the whole prompt.
double Prefill(const Setup& s, WatermarkMode mode) {
  Engine engine(&s.model, Options(mode, 1));
  SamplingParams sp;
  sp.max_tokens = 1;
  auto prompt = Prompt(s.prefill_tokens, s.model.config.vocab_size, 0);
  (void)engine.Submit(TenantId(1), prompt, sp);
  const auto t0 = Clock::now();
  engine.RunUntilIdle();
  return s.prefill_tokens / Seconds(t0, Clock::now());
}

// Decode tok/s (aggregate over `seqs` sequences): prompts of 4 tokens are
// prefilled first (not timed), then every sequence decodes until the context
// reaches decode_positions.
double Decode(const Setup& s, int seqs, WatermarkMode mode,
              ScrubPolicy scrub = ScrubPolicy::kNone) {
  EngineOptions options = Options(mode, seqs);
  options.scrub = scrub;
  Engine engine(&s.model, options);
  SamplingParams sp;
  sp.max_tokens = s.decode_positions - 4 + 1;
  sp.ignore_eos = true;
  for (int i = 0; i < seqs; ++i) {
    (void)engine.Submit(TenantId(1 + i % 8),
                        Prompt(4, s.model.config.vocab_size, i), sp);
  }
  engine.Step();  // prefill all, first token each
  const auto t0 = Clock::now();
  engine.RunUntilIdle();
  const double dt = Seconds(t0, Clock::now());
  return static_cast<double>(seqs) * (sp.max_tokens - 1) / dt;
}

// The stamp check alone, timed directly: what CheckPageStamps costs per
// decoded token (every layer, context growing 1..decode_positions), as a
// share of the time a decoded token takes. Immune to run-to-run noise, which
// is larger than the check itself.
double CheckShare(const Setup& s, double decode_tokens_per_s) {
  const ModelConfig& c = s.model.config;
  PagePoolOptions po;
  po.n_layers = 1;
  po.layout.page_tokens = 16;
  po.layout.kv_heads = c.n_kv_heads;
  po.layout.head_dim = c.head_dim();
  po.num_pages = (s.decode_positions + 15) / 16;
  PagePool pool(po);
  auto pages = pool.Allocate(TenantId(1), RequestId(1), po.num_pages);
  std::vector<float> row(c.kv_dim(), 0.5f);
  for (int pos = 0; pos < s.decode_positions; ++pos) {
    kernels::WriteKvRow(
        pool.layer_base(0), pool.layout(), pages[pos / 16], pos % 16,
        row.data(), row.data(),
        StampIdentity{RequestId(1), TenantId(1), pages[pos / 16].generation}, 0,
        nullptr);
  }
  kernels::PagedAttentionArgs a;
  a.layer_base = pool.layer_base(0);
  a.layout = pool.layout();
  a.block_table = pages.data();
  a.num_block_pages = po.num_pages;
  a.reader_tenant = TenantId(1);
  a.reader_request = RequestId(1);
  std::vector<WatermarkViolation> violations;
  a.violations = &violations;
  const int rounds = 200;
  int found = 0;
  const auto t0 = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    for (int n = 1; n <= s.decode_positions; ++n)
      found += kernels::CheckPageStamps(a, n);
  }
  const double per_call_s =
      Seconds(t0, Clock::now()) / (rounds * s.decode_positions);
  if (found != 0)
    std::fprintf(stderr, "unexpected violations in the check benchmark\n");
  return per_call_s * c.n_layers * decode_tokens_per_s;
}

// Scrubbing on free, timed directly: what freeing one request's pages
// (a context of decode_positions tokens, every layer) costs with `scrub`
// over the same free with none, in seconds per request. Free and
// reallocate in a loop; the allocation is the same in both.
double ScrubSecondsPerRequest(const Setup& s, ScrubPolicy scrub) {
  const ModelConfig& c = s.model.config;
  auto time_policy = [&](ScrubPolicy policy) {
    PagePoolOptions po;
    po.n_layers = c.n_layers;
    po.layout.page_tokens = 16;
    po.layout.kv_heads = c.n_kv_heads;
    po.layout.head_dim = c.head_dim();
    po.num_pages = (s.decode_positions + 15) / 16;
    po.scrub = policy;
    PagePool pool(po);
    const int rounds = 2000;
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      for (int r = 0; r < rounds; ++r) {
        pool.Free(pool.Allocate(TenantId(1), RequestId(r + 1), po.num_pages));
      }
      best = std::min(best, Seconds(t0, Clock::now()) / rounds);
    }
    return best;
  };
  return std::max(0.0, time_policy(scrub) - time_policy(ScrubPolicy::kNone));
}

template <typename F>
double Best(F f) {
  double best = 0;
  for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r)
    best = std::max(best, f());
  return best;
}

void Measure(const Setup& s) {
  const int threads = absl::GetFlag(FLAGS_threads);
  std::printf(
      "\n## %s (%s), threads=%d, decode to %d positions, prefill %d tokens\n",
      s.name.c_str(), s.model.source.c_str(), threads, s.decode_positions,
      s.prefill_tokens);
  std::printf("| %-34s | %14s |\n", "figure", "value");
  std::printf("|%s|%s|\n", std::string(36, '-').c_str(),
              std::string(16, '-').c_str());
  auto row = [](const std::string& name, double v, const char* unit) {
    std::printf("| %-34s | %10.1f %-3s |\n", name.c_str(), v, unit);
  };
  row("prefill", Best([&] { return Prefill(s, WatermarkMode::kEnforce); }),
      "t/s");
  // Single-stream decode: off and enforce interleaved, best of each.
  double off = 0, enforce = 0;
  for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
    off = std::max(off, Decode(s, 1, WatermarkMode::kOff));
    enforce = std::max(enforce, Decode(s, 1, WatermarkMode::kEnforce));
  }
  row("decode 1 seq, watermark off", off, "t/s");
  row("decode 1 seq, watermark enforce", enforce, "t/s");
  std::printf("| %-34s | %13.4f  |\n", "enforce / off (1 seq)", enforce / off);
  std::printf("| %-34s | %13.3f%% |\n", "stamp check share (timed directly)",
              100.0 * CheckShare(s, enforce));
  // A request decoding to decode_positions takes decode_positions / enforce
  // seconds single-stream; scrubbing its pages on free adds this share.
  const double request_s = s.decode_positions / enforce;
  for (ScrubPolicy p : {ScrubPolicy::kZero, ScrubPolicy::kPoison}) {
    const double scrub_s = ScrubSecondsPerRequest(s, p);
    row(absl::StrFormat("scrub %s per request (timed)", ScrubPolicyName(p)),
        scrub_s * 1e6, "us");
    std::printf(
        "| %-34s | %13.3f%% |\n",
        absl::StrFormat("scrub %s share of a request", ScrubPolicyName(p))
            .c_str(),
        100.0 * scrub_s / request_s);
  }
  double single = enforce;
  for (absl::string_view size : absl::StrSplit(absl::GetFlag(FLAGS_batch_sizes),
                                               ',', absl::SkipEmpty())) {
    int seqs = 0;
    if (!absl::SimpleAtoi(size, &seqs) || seqs < 1) {
      std::fprintf(stderr, "bad --batch_sizes entry '%s'\n",
                   std::string(size).c_str());
      std::exit(2);
    }
    double b_off = 0, b_enf = 0;
    for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
      b_off = std::max(b_off, Decode(s, seqs, WatermarkMode::kOff));
      b_enf = std::max(b_enf, Decode(s, seqs, WatermarkMode::kEnforce));
    }
    row(absl::StrFormat("decode %d seqs aggregate, off", seqs), b_off, "t/s");
    row(absl::StrFormat("decode %d seqs aggregate, enforce", seqs), b_enf,
        "t/s");
    std::printf("| %-34s | %13.4f  |\n",
                absl::StrFormat("enforce / off (%d seqs)", seqs).c_str(),
                b_enf / b_off);
    std::printf("| %-34s | %13.2fx |\n",
                absl::StrFormat("%d seqs / 1 seq (enforce)", seqs).c_str(),
                b_enf / single);
    double b_zero = 0, b_none = 0;
    for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
      b_none = std::max(b_none, Decode(s, seqs, WatermarkMode::kEnforce));
      b_zero = std::max(
          b_zero, Decode(s, seqs, WatermarkMode::kEnforce, ScrubPolicy::kZero));
    }
    std::printf("| %-34s | %13.4f  |\n",
                absl::StrFormat("scrub zero / none (%d seqs)", seqs).c_str(),
                b_zero / b_none);
  }
}

}  // namespace
}  // namespace kvcanary::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace kvcanary::engine;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_models), ',')) {
    if (name == "260k") {
      const std::string path =
          absl::GetFlag(FLAGS_shared_dir) + "/models/stories260K.bin";
      auto model = LoadLlama2cModel(path);
      if (!model.ok()) {
        std::fprintf(
            stderr,
            "%s; measuring the embedded synthetic 260K-shape model instead\n",
            model.status().ToString().c_str());
        model = DefaultModel();
      }
      Measure(Setup{"stories260K", *std::move(model), 256, 256});
    } else if (name == "15m") {
      Measure(Setup{"15M shape",
                    SyntheticModel(Stories15MShapeConfig(), kDefaultModelSeed),
                    256, 128});
    } else {
      std::fprintf(stderr, "unknown model '%s'\n", std::string(name).c_str());
      return 2;
    }
  }
  return 0;
}
