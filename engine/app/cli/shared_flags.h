// The flags more than one kvcanary-engine subcommand reads, declared once
// (shared_flags.cc): the model and the engine's settings, which generate,
// demo, write-model, serve and up share, and what turns them into options.
// A flag only one subcommand reads is declared in that subcommand's file;
// those of the nodes, which serve and up share, in node_flags.h.
#ifndef KVCANARY_ENGINE_APP_CLI_SHARED_FLAGS_H_
#define KVCANARY_ENGINE_APP_CLI_SHARED_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/engine.h"
#include "engine/model/model_loader.h"

// The model: generate, demo, serve, up (write-model: --tokenizer, --seed).
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, tokenizer);
ABSL_DECLARE_FLAG(int, context);
ABSL_DECLARE_FLAG(uint64_t, seed);
// The engine: generate, serve, up (demo: --threads).
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(int, page_tokens);
ABSL_DECLARE_FLAG(std::string, scrub);
ABSL_DECLARE_FLAG(std::string, prefix_cache);
ABSL_DECLARE_FLAG(std::string, cache_salt);
ABSL_DECLARE_FLAG(int, host_tier_pages);
ABSL_DECLARE_FLAG(std::string, watermark);
ABSL_DECLARE_FLAG(std::string, fault);

namespace kvcanary::engine::cli {

// The exit code of subcommand `command` that ended with `status`: 0, or 1
// after "kvcanary-engine <command>: <status>" on stderr.
int ExitCode(absl::string_view command, const absl::Status& status);

// The model and tokenizer --model, --tokenizer and --context name; a note
// for the operator (a context above a GGUF file's) goes to stderr.
absl::StatusOr<LoadedModel> LoadModelFromFlags();

// --watermark, --scrub, --fault, --prefix-cache, --threads and
// --page-tokens into engine options, checked; the rest of them default.
absl::StatusOr<EngineOptions> EngineOptionsFromFlags();

}  // namespace kvcanary::engine::cli

#endif  // KVCANARY_ENGINE_APP_CLI_SHARED_FLAGS_H_
