// One OpenAI-compatible target, as every auditor command talks to it
// (probe, sidecar, accept, facts, cache-audit) as several tenants: its base
// URL normalised (target_url.h), the scheme checked, the model discovered,
// the limit it advertises, EVERY tenant's key checked with a one-token
// completion before the command's first probe (many servers answer
// /v1/models without one), request bodies (usage asked for in streams),
// requests sent alone, and "target down" after too many requests in a row
// without an HTTP answer.
// Not thread-safe; owned by the command's thread (MultiClient calls back
// on that thread too).
#ifndef KVCANARY_AUDITOR_TARGET_TARGET_H_
#define KVCANARY_AUDITOR_TARGET_TARGET_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "auditor/target/completion.h"
#include "auditor/target/limits.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/target_url.h"
#include "auditor/target/tenants.h"

namespace kvcanary::auditor {

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

  // The key, and t.extra_header where set.
  std::vector<std::string> Headers(const AuditTenant& t) const {
    std::vector<std::string> h = {"Authorization: Bearer " + t.api_key};
    if (!t.extra_header.empty()) h.push_back(t.extra_header);
    return h;
  }
  // A greedy /v1/completions body; streamed ones ask for usage; with
  // "cache_salt" where `cache_salt` is not empty.
  // `extra`: more top-level fields of the request body (an object; null:
  // none), e.g. vLLM's kv_cache_report_mode.
  std::string Body(const std::string& prompt, int max_tokens, bool stream,
                   const nlohmann::json& extra = nullptr,
                   const std::string& cache_salt = "") const;
  // A probe of `tenant` for MultiClient (its body_salt in the body).
  ProbeRequest Request(uint64_t id, const AuditTenant& tenant,
                       const std::string& prompt, int max_tokens, bool stream,
                       const nlohmann::json& extra = nullptr) const;

  // One request, alone; an error completion (no request sent) once down.
  Completion SendAlone(const AuditTenant& t, const std::string& prompt,
                       int max_tokens, bool stream,
                       const nlohmann::json& extra = nullptr);
  // Counts requests in a row without an HTTP answer (call for each answer
  // of requests sent elsewhere, e.g. through a MultiClient).
  void NoteTransport(const Completion& c);
  // OK, or "target down at <time>: ..." once too many failed in a row.
  const absl::Status& down() const { return down_; }

 private:
  // A one-token completion as `t`; the error naming `t` if it failed.
  absl::Status CheckKey(const AuditTenant& t);

  const TargetOptions o_;
  TargetUrl url_;
  absl::Status url_status_;
  bool connected_ = false;
  std::string model_;
  TargetLimit advertised_;
  int consecutive_failures_ = 0;
  absl::Status down_;
};

// For a command that uses fewer tenants than the file holds: which it used
// and as what, e.g. "4 keys checked; used: acme (sweeps), globex (load);
// not used: initech, umbrella". `used`: (tenant index, role) in order.
std::string TenantsUsedText(
    const std::vector<AuditTenant>& all,
    const std::vector<std::pair<int, std::string>>& used);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_TARGET_H_
