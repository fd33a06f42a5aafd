// kvcanary-engine generate: one completion in this process, printed.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/status_macros.h"
#include "engine/app/cli/commands.h"
#include "engine/app/cli/shared_flags.h"
#include "engine/core/engine.h"
#include "engine/model/tokenizer.h"

ABSL_FLAG(std::string, prompt, "", "Text to complete.");
ABSL_FLAG(int, max_tokens, 256, "Tokens to generate at most.");
ABSL_FLAG(double, temperature, 0.0, "Sampling temperature; 0 is greedy.");
ABSL_FLAG(double, top_p, 0.9,
          "Nucleus sampling threshold, used when --temperature > 0.");
ABSL_FLAG(bool, echo, false,
          "Print the prompt before the completion, as llama2.c's run does.");

namespace kvcanary::engine::cli {
namespace {

SamplingParams SamplingFromFlags() {
  SamplingParams sampling;
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  sampling.seed = absl::GetFlag(FLAGS_seed);
  sampling.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  return sampling;
}

// The completion of `seq`, after its prompt with --echo.
std::string CompletionText(const Sequence& seq, const Tokenizer& tokenizer) {
  if (absl::GetFlag(FLAGS_echo)) {
    std::vector<int> all(seq.prompt.begin() + 1, seq.prompt.end());
    all.insert(all.end(), seq.output.begin(), seq.output.end());
    return tokenizer.DecodeAll(kBosToken, all);
  }
  return tokenizer.DecodeAll(seq.prompt.back(), seq.output);
}

absl::Status Generate() {
  ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelFromFlags());
  ASSIGN_OR_RETURN(EngineOptions options, EngineOptionsFromFlags());
  options.scheduler.max_batch_seqs = 1;
  Engine engine(&loaded.model, options);
  std::vector<int> prompt = loaded.tokenizer.Encode(
      absl::GetFlag(FLAGS_prompt), /*bos=*/true, /*eos=*/false);
  ASSIGN_OR_RETURN(RequestId id,
                   engine.Submit(TenantId(1), prompt, SamplingFromFlags()));
  engine.RunUntilIdle();
  const Sequence& seq = *engine.Get(id);
  if (seq.state.finish_reason() == FinishReason::kAbort) {
    return seq.state.abort_status();
  }
  const std::string text = CompletionText(seq, loaded.tokenizer);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  for (const auto& v : seq.violations) {
    std::fprintf(stderr, "watermark violation: %s\n", v.DebugString().c_str());
  }
  return absl::OkStatus();
}

const CommandRegistration kGenerate(
    EngineCommands(),
    {10,
     {"generate",
      "Generates one completion in this process and prints it.",
      {"model", "tokenizer", "context", "prompt", "max_tokens", "temperature",
       "top_p", "seed", "echo", "threads", "page_tokens", "scrub",
       "prefix_cache", "watermark", "fault", "sample_wrong_row_steps",
       "numerics"},
      {}},
     [](const CliParse&) { return ExitCode("generate", Generate()); }});

}  // namespace
}  // namespace kvcanary::engine::cli
