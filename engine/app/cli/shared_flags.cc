#include "engine/app/cli/shared_flags.h"

#include <cstdio>
#include <string>

#include "common/status_macros.h"
#include "engine/core/faults.h"

ABSL_FLAG(std::string, model, "",
          "Model to load: a llama2.c checkpoint or a GGUF file (docs/gguf.md: "
          "llama architecture, F32, F16 and Q8_0 tensors); empty: the "
          "embedded default model (docs/model.md).");
ABSL_FLAG(std::string, tokenizer, "",
          "llama2.c tokenizer file: required with a llama2.c --model; with a "
          "GGUF one it replaces the file's own tokenizer. write-model: the "
          "tokenizer to embed in a GGUF file.");
ABSL_FLAG(int, context, 0,
          "Context length (positions) to run the model at; 0: the model's. A "
          "llama2.c checkpoint's is the length it was trained with, the "
          "upper bound; a GGUF file's llama.context_length may be below what "
          "the model was trained with, so any value up to 2^20 is taken, "
          "with a note above it.");
ABSL_FLAG(uint64_t, seed, 0,
          "generate: the sampling seed (0: a fixed default); write-model: the "
          "weights' seed (0: the embedded default model's).");
ABSL_FLAG(int, threads, 1,
          "Threads for the kernels, the engine thread included (1 to 256).");
ABSL_FLAG(int, page_tokens, 16, "Token slots per KV page (1 to 4096).");
ABSL_FLAG(std::string, scrub, "none",
          "What a freed KV page gets before it is reused: none, zero or "
          "poison.");
ABSL_FLAG(std::string, prefix_cache, "tenant",
          "Reuse the cached KV pages of earlier prompts: tenant (keys salted "
          "by tenant: a tenant's own prompts only), global (one key space "
          "for all tenants: another tenant's identical prefix hits; a "
          "foreign_tenant_read, so use with --watermark=detect or off to see "
          "it served) or off. true and false mean tenant and off.");
ABSL_FLAG(std::string, cache_salt, "ignore",
          "What a request body's cache_salt does to its prefix cache keys: "
          "ignore (nothing), scoped (partitions the tenant's own cache, "
          "never reaching another's) or client (replaces the tenant, as "
          "vLLM and SGLang do: whoever sends another tenant's salt reads its "
          "pages).");
ABSL_FLAG(int, host_tier_pages, 0,
          "Pages of the host-memory KV tier that prefix pages evicted from "
          "the page pool spill to (LRU); a hit promotes them back instead of "
          "recomputing. 0 (the default): no tier.");
ABSL_FLAG(std::string, watermark, "enforce",
          "Page stamp check on every KV read: off, detect (record a "
          "violation and serve) or enforce (record it and fail the "
          "request).");
ABSL_FLAG(std::string, numerics, "invariant",
          "The matmuls' arithmetic: invariant (every answer bitwise the same "
          "alone and in any batch) or variant (as a healthy GPU server: "
          "reductions split by the step's sequence count, partials rounded "
          "to bf16, so an answer under load may differ from the answer "
          "alone; bitwise the same for a given batch shape and --threads).");
ABSL_FLAG(int, sample_wrong_row_steps, 8,
          "The sample-wrong-row fault's R: decode steps each firing gives "
          "sequences another's token (1 to 1000000).");
ABSL_FLAG(std::string, fault, "none",
          "Fault switches to turn on, comma-separated (kvcanary-engine "
          "faults lists them); none: all off.");

namespace kvcanary::engine::cli {

int ExitCode(absl::string_view command, const absl::Status& status) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "kvcanary-engine %s: %s\n", std::string(command).c_str(),
               status.ToString().c_str());
  return 1;
}

absl::StatusOr<LoadedModel> LoadModelFromFlags() {
  ModelLoadOptions options;
  options.model_path = absl::GetFlag(FLAGS_model);
  options.tokenizer_path = absl::GetFlag(FLAGS_tokenizer);
  options.context = absl::GetFlag(FLAGS_context);
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelAndTokenizer(options));
  if (!loaded.note.empty()) {
    std::fprintf(stderr, "note: %s\n", loaded.note.c_str());
  }
  return loaded;
}

absl::StatusOr<EngineOptions> EngineOptionsFromFlags() {
  EngineOptions e;
  ASSIGN_OR_RETURN(e.watermark,
                   ParseWatermarkMode(absl::GetFlag(FLAGS_watermark)));
  ASSIGN_OR_RETURN(e.scrub, ParseScrubPolicy(absl::GetFlag(FLAGS_scrub)));
  ASSIGN_OR_RETURN(e.numerics, ParseNumerics(absl::GetFlag(FLAGS_numerics)));
  ASSIGN_OR_RETURN(e.faults, FaultSet::Parse(absl::GetFlag(FLAGS_fault)));
  ASSIGN_OR_RETURN(e.prefix_cache,
                   ParsePrefixCacheMode(absl::GetFlag(FLAGS_prefix_cache)));
  ASSIGN_OR_RETURN(e.cache_salt,
                   ParseCacheSaltMode(absl::GetFlag(FLAGS_cache_salt)));
  e.host_tier_pages = absl::GetFlag(FLAGS_host_tier_pages);
  if (e.host_tier_pages < 0 || e.host_tier_pages > (1 << 20)) {
    return absl::InvalidArgumentError(
        "--host-tier-pages must be in [0, 1048576]");
  }
  e.sample_wrong_row_steps = absl::GetFlag(FLAGS_sample_wrong_row_steps);
  if (e.sample_wrong_row_steps < 1 || e.sample_wrong_row_steps > 1000000) {
    return absl::InvalidArgumentError(
        "--sample-wrong-row-steps must be in [1, 1000000]");
  }
  e.num_threads = absl::GetFlag(FLAGS_threads);
  e.page_tokens = absl::GetFlag(FLAGS_page_tokens);
  if (e.num_threads < 1 || e.num_threads > 256) {
    return absl::InvalidArgumentError("--threads must be in [1, 256]");
  }
  if (e.page_tokens < 1 || e.page_tokens > 4096) {
    return absl::InvalidArgumentError("--page-tokens must be in [1, 4096]");
  }
  return e;
}

}  // namespace kvcanary::engine::cli
