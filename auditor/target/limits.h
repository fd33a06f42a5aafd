// A target's input limit, as it is: read from where the widely used servers
// advertise it (docs/targets.md says which field of which server), or
// measured: bounded by the longest prompt seen processed whole and the
// shortest seen refused or cut (a server that silently keeps part of an
// over-long prompt), narrowed by bisection and re-checked. The auditor has no
// tokenizer: every count here is one the target reported, set against the
// auditor's own prediction of the prompt it built.
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

// What a reported prompt count says of a prompt whose count the auditor
// predicted from its own calibration (never from a count the target
// reported for that very prompt, which a truncating server already cut).
enum class CountFate {
  kUnknown,  // no count reported
  kWhole,    // processed whole: within `tolerance` of the prediction
  kCut,      // fewer: part of the prompt was not processed
  kOver,     // more: the prediction does not hold for this prompt
};
// `reported` < 0: kUnknown.
CountFate JudgeCount(int predicted, int reported, int tolerance);
// unknown, whole, cut, over.
const char* CountFateName(CountFate fate);

// What one measurement prompt got back.
struct LadderAnswer {
  int status = 0;          // 0: no HTTP answer (transport error)
  int prompt_tokens = -1;  // usage.prompt_tokens of a 200; -1 none
};

// One prompt the measurement sent.
struct LadderStep {
  int predicted = 0;  // its prompt tokens, by the caller's filler (-1: none)
  LadderAnswer answer;
  // whole (a 200 counting `predicted` within the tolerance), cut (a 200
  // counting fewer), refused (400, 413, 422) or other (anything else: a
  // count above the prediction, another status, no count, no answer).
  std::string fate;
};

// Builds and sends, alone, a prompt of `tokens` prompt tokens — exactly
// where the caller's filler can hit it, else the nearest below — and
// returns what it sent and got (predicted -1: nothing that short).
using LimitProbe = std::function<LadderStep(int tokens)>;

struct LimitMeasureOptions {
  int shortest_tokens = 0;  // the shortest prompt the filler builds
  int grain_tokens = 1;     // the filler's unit: the ladder's first step
  int tolerance = 0;        // how much a prompt's count may vary (calibrated)
  int max_tokens = 16384;   // the ladder's ceiling
};

struct LadderResult {
  // Both bounds seen, and both held when sent again.
  bool found = false;
  int limit = 0;           // the longest prompt seen processed whole (0: none)
  int upper = 0;           // the shortest prompt seen cut or refused (0: none)
  bool truncates = false;  // some 200 counted fewer tokens than were sent
  LadderStep truncated;    // the first such step
  int refused_status = 0;  // the status of a refusal seen (0: none)
  bool refused_other = false;  // an `other` answer stopped the measurement
  std::string how;             // for people: what bounds it, and how it held
  std::vector<LadderStep> steps;

  // For evidence: found, limit, upper, truncates, how, and each step's
  // prediction, status, prompt_tokens and fate.
  nlohmann::json ToJson() const;
};

// Measures a limit that is advertised nowhere. The lower bound is the
// longest prompt seen processed whole, the upper the shortest seen cut or
// refused — never a count the target reported for a cut prompt, which says
// only what it kept. Grows the prompt (shortest + grain × 1, 2, 4, ...)
// until one is cut or refused or the next would pass max_tokens; bisects
// between the bounds until they are one token apart or the filler cannot
// build a prompt between them; then sends both bounds once more, and
// `found` only if the longest whole prompt is whole again and the shortest
// cut or refused one is cut or refused again. An `other` answer ends the
// measurement (refused_other).
LadderResult MeasureLimit(const LimitProbe& send,
                          const LimitMeasureOptions& options);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_LIMITS_H_
