#include "engine/app/demo.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "common/text_table.h"
#include "engine/core/engine.h"

namespace kvcanary::engine {
namespace {

const char* const kPromptSeeds[] = {
    "Once upon a time",         "The little dog ran to",
    "Lily and Ben went to the", "One day, a big red ball",
    "Tom was sad because",      "The sun was shining and",
    "A girl named Sue had a",   "There was a cat who liked"};

std::string PromptFor(int tenant, int i) {
  return absl::StrCat(kPromptSeeds[(tenant + i) % 8], " ",
                      kPromptSeeds[(tenant * 3 + i) % 8]);
}

// FNV-1a over the token ids: the same output prints the same hash in every
// run (absl::HashOf is seeded per process).
uint32_t Hash32(const std::vector<int>& tokens) {
  uint32_t h = 2166136261u;
  for (int t : tokens) {
    for (int shift = 0; shift < 32; shift += 8) {
      h ^= static_cast<uint32_t>(t) >> shift & 0xffu;
      h *= 16777619u;
    }
  }
  return h;
}

struct Request {
  TenantId tenant;
  std::vector<int> prompt;
  RequestId id;
};

EngineOptions Options(const DemoOptions& o, WatermarkMode mode) {
  EngineOptions e;
  e.num_threads = o.num_threads;
  e.watermark = mode;
  e.scheduler.max_batch_seqs = 16;
  // Few pages, so tenants reuse each other's freed pages all the time.
  e.num_pages = 64;
  return e;
}

// Plants K/V stamped by `intruder` into slot 0 of the request's first page in
// every layer, as a late transfer write of another tenant would.
void PlantForeignWrite(Engine& engine, const Sequence& seq, TenantId intruder) {
  PagePool* pool = engine.mutable_pool();
  const PageRef ref = seq.block_table[0];
  std::vector<float> row(pool->layout().kv_heads * pool->layout().head_dim,
                         0.5f);
  for (int l = 0; l < pool->n_layers(); ++l) {
    kernels::WriteKvRow(
        pool->layer_base(l), pool->layout(), ref, 0, row.data(), row.data(),
        StampIdentity{RequestId(9999), intruder, ref.generation},
        static_cast<uint32_t>(l), nullptr);
  }
}

// Submits `o.requests_per_tenant` waves of one request per tenant, stepping
// the engine between waves, so that requests join the batch while others
// decode and pages are freed and reused across tenants.
absl::StatusOr<std::vector<Request>> SubmitInWaves(Engine& engine,
                                                   const Tokenizer& tok,
                                                   const DemoOptions& o,
                                                   const SamplingParams& sp) {
  std::vector<Request> requests;
  for (int i = 0; i < o.requests_per_tenant; ++i) {
    for (int t = 1; t <= o.tenants; ++t) {
      Request r{TenantId(t), tok.Encode(PromptFor(t, i), true, false),
                RequestId()};
      ASSIGN_OR_RETURN(r.id, engine.Submit(r.tenant, r.prompt, sp));
      requests.push_back(std::move(r));
    }
    for (int s = 0; s < 5; ++s) engine.Step();
  }
  return requests;
}

// Prints a row per finished request and a summary. Returns an error if any
// request recorded a watermark violation.
absl::Status ReportCleanRun(const Engine& engine,
                            const std::vector<Request>& requests, FILE* out) {
  TextTable table({{"request", TextTable::kLeft, 8},
                   {"tenant", TextTable::kLeft, 7},
                   {"prompt", TextTable::kLeft, 7},
                   {"tokens", TextTable::kLeft, 7},
                   {"finish", TextTable::kLeft, 7},
                   {"violations", TextTable::kLeft, 10},
                   {"output hash"}},
                  TextTable::Plain(1));
  int violations = 0;
  for (const Request& r : requests) {
    const Sequence& s = *engine.Get(r.id);
    violations += static_cast<int>(s.violations.size());
    table.AddRow({absl::StrCat(r.id.value()), absl::StrCat(r.tenant.value()),
                  absl::StrCat(s.prompt.size()), absl::StrCat(s.output.size()),
                  FinishReasonName(s.state.finish_reason()),
                  absl::StrCat(s.violations.size()),
                  absl::StrFormat("%08x", Hash32(s.output))});
  }
  std::fprintf(out, "\n%s", table.ToString().c_str());
  std::fprintf(out,
               "clean run: %zu requests, %d watermark violations, %d pages in "
               "use after\n",
               requests.size(), violations, engine.pool().num_used_pages());
  if (violations != 0) return absl::InternalError("violations in a clean run");
  return absl::OkStatus();
}

// Runs each of `requests`, finished in `batched`, again alone in an engine of
// its own; returns an error unless each gives the tokens it gave batched.
absl::Status CheckBatchInvariance(const Model& model, const DemoOptions& o,
                                  const SamplingParams& sp,
                                  const Engine& batched,
                                  const std::vector<Request>& requests,
                                  FILE* out) {
  int mismatches = 0;
  for (const Request& r : requests) {
    Engine alone(&model, Options(o, WatermarkMode::kEnforce));
    ASSIGN_OR_RETURN(RequestId id, alone.Submit(r.tenant, r.prompt, sp));
    alone.RunUntilIdle();
    if (alone.Get(id)->output != batched.Get(r.id)->output) ++mismatches;
  }
  std::fprintf(
      out,
      "batch invariance: %zu of %zu requests identical alone and batched\n",
      requests.size() - mismatches, requests.size());
  if (mismatches != 0) return absl::InternalError("batch invariance broken");
  return absl::OkStatus();
}

// Runs `victim` under watermark `mode`, plants another tenant's K/V in its
// first page after a few steps, and returns an error unless the check
// catches it.
absl::Status CatchPlantedWrite(const Model& model, const DemoOptions& o,
                               const SamplingParams& sp, const Request& victim,
                               WatermarkMode mode, FILE* out) {
  Engine e(&model, Options(o, mode));
  ASSIGN_OR_RETURN(RequestId id, e.Submit(victim.tenant, victim.prompt, sp));
  for (int s = 0; s < 3; ++s) e.Step();
  PlantForeignWrite(e, *e.Get(id), TenantId(o.tenants + 1));
  e.RunUntilIdle();
  const Sequence& s = *e.Get(id);
  std::fprintf(out,
               "\nplanted write, watermark=%s: finish=%s, %zu tokens returned, "
               "%zu violation(s)\n",
               WatermarkModeName(mode),
               FinishReasonName(s.state.finish_reason()), s.output.size(),
               s.violations.size());
  if (s.violations.empty()) {
    return absl::InternalError("planted write not caught");
  }
  std::fprintf(out, "  first: %s\n", s.violations[0].DebugString().c_str());
  if (mode == WatermarkMode::kEnforce) {
    std::fprintf(out, "  client error: %s\n",
                 s.state.abort_status().ToString().c_str());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunDemo(const Model& model, const Tokenizer& tok,
                     const DemoOptions& o, FILE* out) {
  std::fprintf(out,
               "== kvcanary engine demo: %s, %d tenants x %d requests ==\n",
               model.source.c_str(), o.tenants, o.requests_per_tenant);
  SamplingParams sp;
  sp.max_tokens = o.max_tokens;

  // 1. A multi-tenant workload with continuous batching, no violation.
  Engine engine(&model, Options(o, WatermarkMode::kEnforce));
  ASSIGN_OR_RETURN(std::vector<Request> requests,
                   SubmitInWaves(engine, tok, o, sp));
  engine.RunUntilIdle();
  RETURN_IF_ERROR(ReportCleanRun(engine, requests, out));

  // 2. Batch invariance: every request alone gives the same tokens.
  RETURN_IF_ERROR(CheckBatchInvariance(model, o, sp, engine, requests, out));

  // 3. Another tenant's bytes in a request's pages, caught by the check.
  for (WatermarkMode mode : {WatermarkMode::kDetect, WatermarkMode::kEnforce}) {
    RETURN_IF_ERROR(CatchPlantedWrite(model, o, sp, requests[0], mode, out));
  }
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
