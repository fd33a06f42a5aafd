// A target's input limit, as it is: read from where the widely used servers
// advertise it (docs/targets.md says which field of which server), or
// measured with a ladder of prompt lengths — where do answers become 4xx,
// or where does usage.prompt_tokens stop growing (a server that silently
// keeps part of an over-long prompt). The auditor has no tokenizer: every
// count here is one the target reported.
#ifndef KVCANARY_AUDITOR_TARGET_LIMITS_H_
#define KVCANARY_AUDITOR_TARGET_LIMITS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "auditor/target/http_client.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct TargetLimit {
  // The most prompt tokens a probe with `kBoundaryMaxTokens` to generate
  // may carry (0: unknown): what plants and at-limit probes are sized to.
  // From a context length alone it is that length minus the tokens to
  // generate, which every server accepts whether or not it counts both.
  int prompt_tokens = 0;
  // A prompt longer than this must be refused (0: unknown): the stated
  // prompt limit, or from a context length alone the context itself (some
  // servers accept any prompt shorter than the context, others refuse one
  // that leaves no room for the tokens to generate; none can process one
  // longer than the context).
  int refuse_above = 0;
  int context_tokens = 0;  // prompt + generated (0: unknown)
  std::string source;      // advertised, measured, flag or unknown
  std::string where;       // which field of which endpoint, or how measured
};

// The tokens a boundary (at/past the limit) or ladder probe generates.
inline constexpr int kBoundaryMaxTokens = 16;

// The model probed and its /v1/models entry.
struct ModelEntry {
  std::string id;
  // Its entry in the list; empty when `model` was given but is not listed
  // (a limit is then never read from another model's entry).
  nlohmann::json entry = nlohmann::json::object();
};

// GET /v1/models with `headers` (tenant `tenant`'s key): `model` if given,
// else the first listed. kUnavailable if unreachable, kPermissionDenied
// naming the tenant for a 401/403, kFailedPrecondition for an answer
// without a model list (not an OpenAI-compatible API).
absl::StatusOr<ModelEntry> DiscoverModel(
    const HttpClient& http, const std::string& target,
    const std::vector<std::string>& headers, const std::string& tenant,
    const std::string& model, absl::Duration timeout);

// Reads the limit from the places servers advertise it (docs/targets.md,
// "What the auditor relies on"), in this order: `model_entry` (the
// /v1/models entry of the model: kvcanary's max_prompt_tokens, vLLM's and
// SGLang's max_model_len), llama.cpp's GET /props
// default_generation_settings.n_ctx, TGI's GET /info max_input_tokens
// (older max_input_length), SGLang's GET /get_server_info
// max_req_input_len or context_length, Ollama's POST /api/show num_ctx.
// Training contexts (llama.cpp n_ctx_train, Ollama's model_info) are never
// taken. Endpoints that fail or lack the field are skipped; source
// "unknown" if none has it.
TargetLimit AdvertisedLimit(const HttpClient& http, const std::string& target,
                            const std::vector<std::string>& headers,
                            const nlohmann::json& model_entry,
                            const std::string& model, absl::Duration timeout);

// What one ladder step got back.
struct LadderAnswer {
  int status = 0;          // 0: no HTTP answer (transport error)
  int prompt_tokens = -1;  // usage.prompt_tokens of a 200; -1 none
};
struct LadderStep {
  int units = 0;
  int predicted = 0;  // base + units × unit_tokens
  LadderAnswer answer;
};
struct LadderResult {
  bool found = false;          // a refusal or a truncation bounds the limit
  int limit = 0;               // most prompt tokens processed whole (0: none)
  int largest_units = 0;       // units of the largest prompt processed whole
  bool truncates = false;      // a 200 reported fewer tokens than were sent
  LadderStep truncated;        // the first such step
  bool refused_other = false;  // a status other than 200/400/413/422 stopped it
  std::string how;             // for people: what bounded it
  std::vector<LadderStep> steps;

  // For evidence: found, limit, truncates, how, and each step's units,
  // prediction, status and prompt_tokens.
  nlohmann::json ToJson() const;
};

// Doubles the prompt (1, 2, 4, ... units of `unit_tokens`, on top of
// `base_tokens`) until an answer is a refusal (400, 413, 422), a 200 whose
// prompt_tokens falls short of the prediction by more than `tolerance`, or
// the prediction passes `max_tokens`; then bisects between the last whole
// answer and the first that was not. Any other status, a 200 without a
// count, or a transport error ends the ladder (refused_other). `send(units)`
// sends one prompt alone.
LadderResult MeasureLimit(const std::function<LadderAnswer(int units)>& send,
                          int base_tokens, int unit_tokens, int tolerance,
                          int max_tokens);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_LIMITS_H_
