// kvcanary-bench-tier: the host tier (engine/core/host_tier.h), in process.
//
//   build/bin/kvcanary-bench-tier [--models 260k,15m] [--reps 7]
//                                 [--soak_requests 10000] [--fault NAME]
//
// 1. A 192-token prefix served from the host tier against recomputed, side
//    by side in one run: two engines of the same pool (13 pages, one
//    200-token prompt), one with a tier and one without; another prefix
//    evicts the first between timed requests, so the timed request (the
//    prefix and a fresh 8-token suffix, one generated token) promotes its 12
//    prefix pages in one and recomputes them in the other. Prints the
//    median milliseconds of each and their ratio.
// 2. A soak: --soak_requests requests of four tenants over prefixes every
//    tenant sends, through a pool too small to hold them, with a tier,
//    under --watermark=detect. Prints spills, tier hits, promotions, tier
//    evictions, cached tokens and watermark violations (0 unless --fault
//    names a fault that leaks, such as tier-drops-salt).
// Exit 1 if a figure would count work not done (a refused request, a
// promotion that did not happen) or the soak without a fault saw a
// violation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "bench/machine.h"
#include "engine/core/engine.h"
#include "engine/model/model.h"

ABSL_FLAG(std::string, models, "260k,15m",
          "models for the prefix figure: 260k (the stories260K shape) and "
          "15m (the 15M shape), both synthetic");
ABSL_FLAG(int, reps, 7, "timed requests per engine (the median is printed)");
ABSL_FLAG(int, soak_requests, 10000, "requests of the soak (0: no soak)");
ABSL_FLAG(std::string, fault, "none", "faults of the soak's engine");

namespace kvcanary::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPrefixTokens = 192;  // 12 pages of 16
constexpr int kSuffixTokens = 8;

std::vector<int> Tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t;
  while (static_cast<int>(t.size()) < n) t.push_back(3 + rng() % (vocab - 3));
  return t;
}

// BOS, the prefix of `prefix_seed`, a suffix of `suffix_seed`.
std::vector<int> Prompt(int vocab, uint32_t prefix_seed, uint32_t suffix_seed,
                        int prefix_tokens, int suffix_tokens) {
  std::vector<int> p = {1};
  for (int t : Tokens(prefix_tokens - 1, vocab, prefix_seed)) p.push_back(t);
  for (int t : Tokens(suffix_tokens, vocab, 1000003 + suffix_seed)) {
    p.push_back(t);
  }
  return p;
}

// Runs one request to the end; exits (1) if it was refused.
const Sequence& Run(Engine& engine, TenantId tenant, std::vector<int> prompt,
                    int max_tokens, RequestId* id_out) {
  SamplingParams sp;
  sp.max_tokens = max_tokens;
  sp.ignore_eos = true;
  auto id = engine.Submit(tenant, std::move(prompt), sp);
  if (!id.ok()) {
    std::fprintf(stderr, "submit: %s\n", id.status().ToString().c_str());
    std::exit(1);
  }
  engine.RunUntilIdle();
  *id_out = *id;
  return *engine.Get(*id);
}

// Milliseconds of one timed request of prefix 0 after prefix 1 evicted it.
double TimedRequest(Engine& engine, uint32_t rep, int want_cached) {
  const int vocab = engine.model().config.vocab_size;
  RequestId id;
  Run(engine, TenantId(1),
      Prompt(vocab, 1, 100 + rep, kPrefixTokens, kSuffixTokens), 1, &id);
  engine.Release(id);
  const auto t0 = Clock::now();
  const Sequence& seq =
      Run(engine, TenantId(1),
          Prompt(vocab, 0, 200 + rep, kPrefixTokens, kSuffixTokens), 1, &id);
  const double ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (seq.output.size() != 1 || seq.cached_tokens != want_cached) {
    std::fprintf(stderr,
                 "timed request: %zu tokens, %d cached tokens (want 1, %d)\n",
                 seq.output.size(), seq.cached_tokens, want_cached);
    std::exit(1);
  }
  engine.Release(id);
  return ms;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void PrefixFigure(const char* name, const Model& model) {
  const int pages = (kPrefixTokens + kSuffixTokens + 15) / 16;  // 13
  EngineOptions o;
  o.num_pages = pages;
  o.scheduler.max_prefill_tokens = 1 << 20;
  EngineOptions tiered = o;
  tiered.host_tier_pages = 64;
  Engine with_tier(&model, tiered), without(&model, o);
  RequestId id;
  for (Engine* e : {&with_tier, &without}) {  // prefix 0 cached once
    Run(*e, TenantId(1),
        Prompt(model.config.vocab_size, 0, 0, kPrefixTokens, kSuffixTokens), 1,
        &id);
    e->Release(id);
  }
  std::vector<double> tier_ms, recompute_ms;
  for (int r = 0; r < absl::GetFlag(FLAGS_reps); ++r) {
    tier_ms.push_back(TimedRequest(with_tier, r, kPrefixTokens));
    recompute_ms.push_back(TimedRequest(without, r, 0));
  }
  const double t = Median(tier_ms), c = Median(recompute_ms);
  std::printf("%-12s %12.3f %12.3f %8.2fx %10llu\n", name, t, c, c / t,
              static_cast<unsigned long long>(
                  with_tier.prefix_cache()->promoted_pages()));
}

struct SoakTotals {
  uint64_t requests = 0, cached_tokens = 0, violations = 0, foreign = 0;
  uint64_t refused = 0, flagged = 0;  // requests: refused, with violations
};

// Four tenants, 24 shared 64-token prefixes (Zipf-ish: low seeds more
// often), a 4-token suffix, two generated tokens; a 48-page pool.
SoakTotals Soak(Engine& engine, int requests) {
  std::mt19937 rng(42);
  const int vocab = engine.model().config.vocab_size;
  SoakTotals totals;
  SamplingParams sp;
  sp.max_tokens = 2;
  sp.ignore_eos = true;
  std::vector<RequestId> batch;
  for (int i = 0; i < requests; ++i) {
    const uint32_t prefix = std::min(rng() % 24, rng() % 24);
    const TenantId tenant(1 + rng() % 4);
    auto id = engine.Submit(tenant, Prompt(vocab, prefix, rng(), 64, 4), sp);
    if (!id.ok()) std::exit(1);
    batch.push_back(*id);
    if (batch.size() < 8 && i + 1 < requests) continue;
    engine.RunUntilIdle();
    for (RequestId r : batch) {
      const Sequence& seq = *engine.Get(r);
      ++totals.requests;
      totals.cached_tokens += seq.cached_tokens;
      totals.violations += seq.violations.size();
      totals.flagged += !seq.violations.empty();
      for (const WatermarkViolation& v : seq.violations) {
        totals.foreign += v.kind == ViolationKind::kForeignTenantRead;
      }
      totals.refused += !seq.state.abort_status().ok();
      engine.Release(r);
    }
    batch.clear();
  }
  return totals;
}

int RunSoak(const Model& model) {
  const int requests = absl::GetFlag(FLAGS_soak_requests);
  if (requests <= 0) return 0;
  auto faults = FaultSet::Parse(absl::GetFlag(FLAGS_fault));
  if (!faults.ok()) {
    std::fprintf(stderr, "%s\n", faults.status().ToString().c_str());
    return 2;
  }
  EngineOptions o;
  o.num_pages = 48;
  o.host_tier_pages = 96;
  o.watermark = WatermarkMode::kDetect;
  o.faults = *faults;
  Engine engine(&model, o);
  const auto t0 = Clock::now();
  const SoakTotals t = Soak(engine, requests);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const PrefixCache& c = *engine.prefix_cache();
  std::printf(
      "\nsoak (faults: %s): %llu requests in %.1f s, %llu cached tokens\n"
      "  spilled %llu, tier hits %llu, promoted %llu, tier evicted %llu, "
      "tier refused %llu\n"
      "  watermark violations %llu (foreign_tenant_read %llu) in %llu "
      "requests, refused requests %llu\n",
      faults->ToString().c_str(), static_cast<unsigned long long>(t.requests),
      s, static_cast<unsigned long long>(t.cached_tokens),
      static_cast<unsigned long long>(c.spilled_pages()),
      static_cast<unsigned long long>(c.tier_hit_pages()),
      static_cast<unsigned long long>(c.promoted_pages()),
      static_cast<unsigned long long>(c.host_tier()->evicted_pages()),
      static_cast<unsigned long long>(c.tier_refused_pages()),
      static_cast<unsigned long long>(t.violations),
      static_cast<unsigned long long>(t.foreign),
      static_cast<unsigned long long>(t.flagged),
      static_cast<unsigned long long>(t.refused));
  if (c.spilled_pages() == 0 || c.promoted_pages() == 0) return 1;
  return faults->empty() && t.violations > 0 ? 1 : 0;
}

}  // namespace
}  // namespace kvcanary::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace kvcanary::engine;
  kvcanary::bench::PrintMachine();
  std::printf(
      "192-token prefix, one token generated: median ms per request\n"
      "%-12s %12s %12s %9s %10s\n",
      "model", "host tier", "recomputed", "speedup", "promoted");
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty())) {
    if (name == "260k") {
      PrefixFigure("260K shape", DefaultModel());
    } else if (name == "15m") {
      PrefixFigure("15M shape",
                   SyntheticModel(Stories15MShapeConfig(), kDefaultModelSeed));
    } else {
      std::fprintf(stderr, "unknown model '%s' (want 260k or 15m)\n",
                   std::string(name).c_str());
      return 2;
    }
  }
  return RunSoak(DefaultModel());
}
