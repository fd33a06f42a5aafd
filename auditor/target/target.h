// One OpenAI-compatible target, as every auditor command talks to it
// (probe, sidecar, accept, facts, cache-audit) as several tenants: its base
// URL normalised (target_url.h), the scheme checked, the model discovered,
// the limit it advertises, EVERY tenant's key checked with a one-token
// completion before the command's first probe (many servers answer
// /v1/models without one), request bodies (usage asked for in streams),
// requests sent alone (again after a 429 or 503, rate_limit.h), "target
// down" after too many requests in a row without an HTTP answer, and the
// tokens spent per tenant against --budget-tokens (spend.h).
// Not thread-safe; owned by the command's thread (MultiClient calls back
// on that thread too).
#ifndef KVCANARY_AUDITOR_TARGET_TARGET_H_
#define KVCANARY_AUDITOR_TARGET_TARGET_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "auditor/target/completion.h"
#include "auditor/target/limits.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/spend.h"
#include "auditor/target/target_url.h"
#include "auditor/target/tenants.h"

namespace kvcanary::auditor {

// Which OpenAI API the requests use: legacy text completions
// (/v1/completions, a `prompt`) or chat completions (/v1/chat/completions,
// `messages`). kAuto: completions where the target answers an OpenAI-shaped
// text completion (or llama.cpp's own pre-OpenAI shape), else chat where it
// has no /v1/completions route or answers it in an unknown shape.
enum class Api { kAuto, kCompletions, kChat };
const char* ApiName(Api api);  // "auto", "completions", "chat"
// "auto", "completions" or "chat"; kInvalidArgument naming the choices.
absl::StatusOr<Api> ParseApi(absl::string_view name);

struct TargetOptions {
  // The base URL: http(s)://host:port, with or without /v1 (target_url.h).
  std::string target;
  // Every tenant of the tenants file: all their keys are checked, whether
  // or not the command uses them all.
  std::vector<AuditTenant> tenants;
  std::string model;  // empty: the first of /v1/models
  absl::Duration request_timeout = absl::Seconds(30);
  // Requests in a row without an HTTP answer before the target is down.
  int max_consecutive_failures = 20;
  Api api = Api::kAuto;
  // The most tokens (prompt + completion) the command may spend; 0: no
  // limit. SendAlone sends nothing once the next answer might pass it.
  int64_t budget_tokens = 0;
};

class Target {
 public:
  explicit Target(TargetOptions options);

  // The base URL parsed (kInvalidArgument) and, for https://, the scheme
  // checked against what the port speaks (kFailedPrecondition within about
  // a second for a plain-HTTP port). Sends no request to the API; once OK,
  // later calls return OK at once.
  absl::Status Connect();

  // Connect(), then /v1/models (the first tenant's key), the advertised
  // limit, and every tenant's key with a one-token completion, in the
  // tenants file's order. kPermissionDenied naming the tenant whose key was
  // refused; kUnavailable for an unreachable target; kFailedPrecondition
  // for one that is not an OpenAI-compatible API or does not complete a
  // short prompt. REQUIRES: at least one tenant.
  absl::Status Discover();

  const TargetOptions& options() const { return o_; }
  // The normalised base URL (valid once Connect() returned OK; until then
  // the URL as given, without trailing slashes).
  const std::string& root() const { return url_.root; }
  const TargetUrl& url() const { return url_; }
  const std::string& model() const { return model_; }
  const TargetLimit& advertised() const { return advertised_; }
  // The API requests use: options().api, or what Discover() chose for
  // kAuto (kCompletions until then). Never kAuto.
  Api api() const { return api_; }
  // Why that API: "--api=chat", or auto's reason ("/v1/completions answered
  // HTTP 404", "/v1/completions answered an OpenAI text completion").
  const std::string& api_reason() const { return api_reason_; }
  // The request line requests are sent with, e.g. "POST /v1/chat/completions",
  // and the URL they go to.
  std::string RequestLine() const;
  std::string ApiUrl() const;

  // The key, and t.extra_header where set.
  std::vector<std::string> Headers(const AuditTenant& t) const {
    std::vector<std::string> h = {"Authorization: Bearer " + t.api_key};
    if (!t.extra_header.empty()) h.push_back(t.extra_header);
    return h;
  }
  // A greedy body for api(): completions `prompt`, or chat `messages` (one
  // user message holding `prompt`); `max_tokens` (or
  // `max_completion_tokens` where the target asked for it); streamed ones
  // ask for usage; with "cache_salt" where `cache_salt` is not empty.
  // `extra`: more top-level fields of the request body (an object; null:
  // none), e.g. vLLM's kv_cache_report_mode. In chat, completions'
  // `"logprobs": k` becomes `"logprobs": true, "top_logprobs": k`, and
  // `echo` is never sent (vLLM's chat `echo` means something else).
  std::string Body(const std::string& prompt, int max_tokens, bool stream,
                   const nlohmann::json& extra = nullptr,
                   const std::string& cache_salt = "") const;
  // A probe of `tenant` for MultiClient (its body_salt in the body).
  ProbeRequest Request(uint64_t id, const AuditTenant& tenant,
                       const std::string& prompt, int max_tokens, bool stream,
                       const nlohmann::json& extra = nullptr) const;

  // The answer to a request built by Request(): ParseCompletion, and its
  // cached tokens counted beyond the shared head (never below 0). Every
  // command reads its answers through this.
  Completion Parse(const ProbeResponse& r, bool stream) const;
  // Prompt tokens that every request shares and that the target reports as
  // cached — a BOS, a constant word, a chat template's header — measured by
  // Discover() as the median cached count of kSharedHeadSamples cache-busted
  // prompts sent alone; 0 where the target reports no cached tokens. They
  // are no cache hit: Parse() counts them as uncached, so latency,
  // cache-audit, kv_events pairs and cached_prefix labels see them alike.
  int shared_head_tokens() const { return shared_head_; }
  static constexpr int kSharedHeadSamples = 5;

  // One request, alone, sent again after each 429/503 answer
  // (rate_limit.h: after its Retry-After, up to kMaxRateLimitRetries
  // times); an error completion, no request sent, once down, or (not_sent)
  // once the budget would not cover another answer as large as the
  // largest so far.
  Completion SendAlone(const AuditTenant& t, const std::string& prompt,
                       int max_tokens, bool stream,
                       const nlohmann::json& extra = nullptr);
  // As SendAlone, with `fillers` (prompts of `t`, each asked for up to
  // `filler_max_tokens`, not streamed) started at the same moment beside
  // it: the request answered in a batch of the shape the load makes. The
  // fillers' answers are counted in spend() and dropped; the whole group is
  // sent again while the request's own answer is rate-limited.
  Completion SendBeside(const AuditTenant& t, const std::string& prompt,
                        int max_tokens, bool stream,
                        const nlohmann::json& extra,
                        const std::vector<std::string>& fillers,
                        int filler_max_tokens);
  // An answer to a request of `t`: its tokens and rate limits into
  // spend(), and requests in a row without an HTTP answer counted (call
  // for each answer of requests sent elsewhere, e.g. through a
  // MultiClient, and for each time such a request is sent again, after a
  // 429, NoteRetry).
  void Note(const AuditTenant& t, const Completion& c);
  void NoteRetry(const AuditTenant& t) { spend_.NoteRetry(t.name); }
  // What the command spent so far, per tenant, and its budget.
  const SpendLedger& spend() const { return spend_; }
  SpendLedger& spend() { return spend_; }
  // OK, or "target down at <time>: ..." once too many failed in a row.
  const absl::Status& down() const { return down_; }

 private:
  // A one-token completion as `t` (`answer`: one already sent so), the
  // error naming `t` if it failed. `reports_cached`: set to whether the
  // answer reported cached tokens.
  absl::Status CheckKey(const AuditTenant& t, bool* reports_cached,
                        std::optional<Completion> answer);
  // Sets shared_head_ (see shared_head_tokens()).
  void MeasureSharedHead();
  // Sets api_ and api_reason_ from options().api, trying completions first
  // for kAuto, as `t`; adapts the chat body to a target that refuses
  // max_tokens or temperature 0 (their 400's message names the field).
  // Returns the last answer to a request sent as the API now stands (the
  // key check of `t`), if any.
  std::optional<Completion> ChooseApi(const AuditTenant& t);
  // One one-token request alone, as `t`, through api_.
  Completion Try(const AuditTenant& t);

  const TargetOptions o_;
  TargetUrl url_;
  absl::Status url_status_;
  bool connected_ = false;
  std::string model_;
  TargetLimit advertised_;
  int shared_head_ = 0;
  Api api_ = Api::kCompletions;
  std::string api_reason_;
  std::string max_tokens_field_ = "max_tokens";
  bool send_temperature_ = true;  // false: the target refuses temperature 0
  int consecutive_failures_ = 0;
  absl::Status down_;
  SpendLedger spend_;
};

// For a command that uses fewer tenants than the file holds: which it used
// and as what, e.g. "4 keys checked; used: acme (sweeps), globex (load);
// not used: initech, umbrella". `used`: (tenant index, role) in order.
std::string TenantsUsedText(
    const std::vector<AuditTenant>& all,
    const std::vector<std::pair<int, std::string>>& used);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_TARGET_H_
