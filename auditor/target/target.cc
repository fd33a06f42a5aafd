#include "auditor/target/target.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "auditor/target/http_client.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

using json = nlohmann::json;

Target::Target(TargetOptions options) : o_(std::move(options)) {
  absl::StatusOr<TargetUrl> url = ParseTargetUrl(o_.target);
  if (url.ok()) {
    url_ = *std::move(url);
  } else {
    url_status_ = url.status();
    absl::string_view given = o_.target;
    while (absl::ConsumeSuffix(&given, "/")) {
    }
    url_.root = std::string(given);
  }
}

absl::Status Target::Connect() {
  if (connected_) return absl::OkStatus();
  RETURN_IF_ERROR(url_status_);
  RETURN_IF_ERROR(CheckScheme(HttpClient(), url_));
  connected_ = true;
  return absl::OkStatus();
}

absl::Status Target::CheckKey(const AuditTenant& t) {
  const Completion c = SendAlone(t, "Once upon a time.", 1, false);
  if (c.status == 401 || c.status == 403) {
    return absl::PermissionDeniedError(absl::StrCat(
        "target ", root(), " refused tenant '", t.name, "' key (HTTP ",
        c.status, " on /v1/completions): check the tenants file"));
  }
  if (c.status == 0) {
    return absl::UnavailableError(
        absl::StrCat("target ", root(), " unreachable: ", c.error.message()));
  }
  // A gateway's key without the header naming a tenant: a server that
  // needs the header answers 400 after it accepted the key (401/403 above
  // would have refused it).
  if (!c.usable && t.gateway && t.extra_header.empty() && c.status == 400) {
    return absl::OkStatus();
  }
  if (!c.usable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "target ", root(), " did not complete a short prompt for tenant '",
        t.name, "' (HTTP ", c.status, "): ", c.error.message()));
  }
  return absl::OkStatus();
}

absl::Status Target::Discover() {
  RETURN_IF_ERROR(Connect());
  HttpClient http;
  const AuditTenant& first = o_.tenants.at(0);
  ASSIGN_OR_RETURN(const ModelEntry entry,
                   DiscoverModel(http, root(), Headers(first), first.name,
                                 o_.model, absl::Seconds(10)));
  model_ = entry.id;
  advertised_ = AdvertisedLimit(http, root(), Headers(first), entry.entry,
                                model_, absl::Seconds(10));
  // Every tenant's key must work where it matters — a completion, not
  // /v1/models, which many servers answer without any key — and every
  // one, used by this command or not: a wrong key in the file is an error
  // whichever command reads it.
  for (const AuditTenant& t : o_.tenants) RETURN_IF_ERROR(CheckKey(t));
  return absl::OkStatus();
}

std::string Target::Body(const std::string& prompt, int max_tokens, bool stream,
                         const json& extra,
                         const std::string& cache_salt) const {
  json j = {{"model", model_},
            {"prompt", prompt},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  if (stream) {
    j["stream"] = true;
    // Usage in a stream's last chunk (vLLM and others send it only then).
    j["stream_options"] = {{"include_usage", true}};
  }
  if (!cache_salt.empty()) j["cache_salt"] = cache_salt;
  if (extra.is_object()) j.update(extra);
  return j.dump();
}

ProbeRequest Target::Request(uint64_t id, const AuditTenant& tenant,
                             const std::string& prompt, int max_tokens,
                             bool stream, const json& extra) const {
  ProbeRequest r;
  r.id = id;
  r.url = url_.Api("/completions");
  r.body = Body(prompt, max_tokens, stream, extra, tenant.body_salt);
  r.headers = Headers(tenant);
  r.timeout = o_.request_timeout;
  return r;
}

void Target::NoteTransport(const Completion& c) {
  if (c.hung_up) return;  // the auditor's doing: says nothing either way
  if (Outcome(c) != "transport_error") {
    consecutive_failures_ = 0;
    return;
  }
  if (++consecutive_failures_ >= o_.max_consecutive_failures && down_.ok()) {
    down_ = absl::UnavailableError(
        absl::StrCat("target down at ", Rfc3339Utc(NowUs()), ": ",
                     consecutive_failures_, " consecutive requests to ", root(),
                     " got no HTTP answer (last: ", c.error.message(), ")"));
  }
}

Completion Target::SendAlone(const AuditTenant& t, const std::string& prompt,
                             int max_tokens, bool stream, const json& extra) {
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

std::string TenantsUsedText(
    const std::vector<AuditTenant>& all,
    const std::vector<std::pair<int, std::string>>& used) {
  std::vector<std::string> roles, unused;
  std::set<int> seen;
  for (const auto& [i, role] : used) {
    roles.push_back(absl::StrCat(all.at(i).name, " (", role, ")"));
    seen.insert(i);
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (!seen.count(static_cast<int>(i))) unused.push_back(all[i].name);
  }
  return absl::StrCat(
      all.size(), all.size() == 1 ? " key" : " keys",
      " checked; used: ", absl::StrJoin(roles, ", "),
      unused.empty() ? "" : "; not used: ", absl::StrJoin(unused, ", "));
}

}  // namespace kvcanary::auditor
