#include "auditor/target/session.h"

#include "absl/strings/str_cat.h"
#include "auditor/target/http_client.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

using json = nlohmann::json;

absl::Status TargetSession::Discover() {
  HttpClient http;
  const AuditTenant& first = o_.tenants.at(0);
  ASSIGN_OR_RETURN(const ModelEntry entry,
                   DiscoverModel(http, o_.target, Headers(first), first.name,
                                 o_.model, absl::Seconds(10)));
  model_ = entry.id;
  advertised_ = AdvertisedLimit(http, o_.target, Headers(first), entry.entry,
                                model_, absl::Seconds(10));
  // Every tenant's key must work where it matters — a completion, not
  // /v1/models, which many servers answer without any key.
  for (const AuditTenant& t : o_.tenants) {
    const Completion c = SendAlone(t, "Once upon a time.", 1, false);
    if (c.status == 401 || c.status == 403) {
      return absl::PermissionDeniedError(absl::StrCat(
          "target ", o_.target, " refused tenant '", t.name, "' key (HTTP ",
          c.status, " on /v1/completions): check the tenants file"));
    }
    if (c.status == 0) {
      return absl::UnavailableError(absl::StrCat(
          "target ", o_.target, " unreachable: ", c.error.message()));
    }
    if (!c.usable) {
      return absl::FailedPreconditionError(absl::StrCat(
          "target ", o_.target, " did not complete a short prompt for tenant '",
          t.name, "' (HTTP ", c.status, "): ", c.error.message()));
    }
  }
  return absl::OkStatus();
}

std::string TargetSession::Body(const std::string& prompt, int max_tokens,
                                bool stream, const json& extra) const {
  json j = {{"model", model_},
            {"prompt", prompt},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  if (stream) {
    j["stream"] = true;
    // Usage in a stream's last chunk (vLLM and others send it only then).
    j["stream_options"] = {{"include_usage", true}};
  }
  if (extra.is_object()) j.update(extra);
  return j.dump();
}

ProbeRequest TargetSession::Request(uint64_t id, const AuditTenant& tenant,
                                    const std::string& prompt, int max_tokens,
                                    bool stream, const json& extra) const {
  ProbeRequest r;
  r.id = id;
  r.url = o_.target + "/v1/completions";
  r.body = Body(prompt, max_tokens, stream, extra);
  r.headers = Headers(tenant);
  r.timeout = o_.request_timeout;
  return r;
}

void TargetSession::NoteTransport(const Completion& c) {
  if (Outcome(c) != "transport_error") {
    consecutive_failures_ = 0;
    return;
  }
  if (++consecutive_failures_ >= o_.max_consecutive_failures && down_.ok()) {
    down_ = absl::UnavailableError(absl::StrCat(
        "target down at ", Rfc3339Utc(NowUs()), ": ", consecutive_failures_,
        " consecutive requests to ", o_.target,
        " got no HTTP answer (last: ", c.error.message(), ")"));
  }
}

Completion TargetSession::SendAlone(const AuditTenant& t,
                                    const std::string& prompt, int max_tokens,
                                    bool stream, const json& extra) {
  Completion result;
  if (!down_.ok()) {
    result.error = down_;
    return result;
  }
  MultiClient one(1);
  bool sent = false;
  one.Run(
      [&]() -> std::optional<ProbeRequest> {
        if (sent) return std::nullopt;
        sent = true;
        return Request(0, t, prompt, max_tokens, stream, extra);
      },
      [&](ProbeResponse r) { result = ParseCompletion(r, stream); },
      [&] { return sent; });
  NoteTransport(result);
  return result;
}

}  // namespace kvcanary::auditor
