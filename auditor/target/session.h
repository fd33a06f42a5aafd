// Talking to one OpenAI-compatible target as several tenants: discovery
// (the model, the limit it advertises, every tenant's key checked with a
// one-token completion, since many servers answer /v1/models without
// one), request bodies (usage asked for in streams), requests sent alone,
// and "target down" after too many requests in a row without an HTTP
// answer. Shared by every auditor command.
// Not thread-safe; owned by the command's thread (MultiClient calls back
// on that thread too).
#ifndef KVCANARY_AUDITOR_TARGET_SESSION_H_
#define KVCANARY_AUDITOR_TARGET_SESSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "auditor/target/completion.h"
#include "auditor/target/limits.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/tenants.h"

namespace kvcanary::auditor {

struct TargetOptions {
  std::string target;  // base URL, e.g. http://127.0.0.1:8000
  std::vector<AuditTenant> tenants;
  std::string model;  // empty: the first of /v1/models
  absl::Duration request_timeout = absl::Seconds(30);
  // Requests in a row without an HTTP answer before the target is down.
  int max_consecutive_failures = 20;
};

class TargetSession {
 public:
  explicit TargetSession(TargetOptions options) : o_(std::move(options)) {}

  // /v1/models (the first tenant's key), the advertised limit, and every
  // tenant's key with a one-token completion. kPermissionDenied naming the
  // tenant whose key was refused; kUnavailable for an unreachable target;
  // kFailedPrecondition for one that is not an OpenAI-compatible API.
  // REQUIRES: at least one tenant.
  absl::Status Discover();

  const TargetOptions& options() const { return o_; }
  const std::string& model() const { return model_; }
  const TargetLimit& advertised() const { return advertised_; }

  std::vector<std::string> Headers(const AuditTenant& t) const {
    return {"Authorization: Bearer " + t.api_key};
  }
  // A greedy /v1/completions body; streamed ones ask for usage.
  // `extra`: more top-level fields of the request body (an object; null:
  // none), e.g. vLLM's kv_cache_report_mode.
  std::string Body(const std::string& prompt, int max_tokens, bool stream,
                   const nlohmann::json& extra = nullptr) const;
  // A probe of `tenant` for MultiClient.
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
  const TargetOptions o_;
  std::string model_;
  TargetLimit advertised_;
  int consecutive_failures_ = 0;
  absl::Status down_;
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_SESSION_H_
