#include "auditor/target/target.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "auditor/target/http_client.h"
#include "auditor/target/prompts.h"
#include "auditor/target/rate_limit.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

using json = nlohmann::json;

const char* ApiName(Api api) {
  switch (api) {
    case Api::kAuto:
      return "auto";
    case Api::kCompletions:
      return "completions";
    case Api::kChat:
      return "chat";
  }
  return "?";
}

absl::StatusOr<Api> ParseApi(absl::string_view name) {
  for (Api a : {Api::kAuto, Api::kCompletions, Api::kChat}) {
    if (name == ApiName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--api=", name, ": want auto, completions or chat"));
}

namespace {

// The path of `api`'s requests under the API root.
const char* ApiPath(Api api) {
  return api == Api::kChat ? "/chat/completions" : "/completions";
}

// The error message of a refusal, lower-cased ("" if none).
std::string RefusalMessage(const Completion& c) {
  return absl::AsciiStrToLower(c.error.message());
}

}  // namespace

Target::Target(TargetOptions options)
    : o_(std::move(options)), spend_(o_.budget_tokens) {
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

absl::Status Target::CheckKey(const AuditTenant& t, bool* reports_cached,
                              std::optional<Completion> answer) {
  const Completion c = answer.has_value() ? *std::move(answer) : Try(t);
  if (reports_cached != nullptr) *reports_cached = c.cached_tokens >= 0;
  if (c.status == 401 || c.status == 403) {
    return absl::PermissionDeniedError(absl::StrCat(
        "target ", root(), " refused tenant '", t.name, "' key (HTTP ",
        c.status, " on ", RequestLine(), "): check the tenants file"));
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
  std::optional<Completion> first_answer = ChooseApi(first);
  bool reports_cached = false;
  for (size_t i = 0; i < o_.tenants.size(); ++i) {
    RETURN_IF_ERROR(CheckKey(o_.tenants[i], i == 0 ? &reports_cached : nullptr,
                             i == 0 ? std::move(first_answer) : std::nullopt));
  }
  if (reports_cached) MeasureSharedHead();
  return absl::OkStatus();
}

std::string Target::RequestLine() const {
  return absl::StrCat("POST /v1", ApiPath(api_));
}

std::string Target::ApiUrl() const { return url_.Api(ApiPath(api_)); }

Completion Target::Try(const AuditTenant& t) {
  return SendAlone(t, "Once upon a time.", 1, false);
}

std::optional<Completion> Target::ChooseApi(const AuditTenant& t) {
  if (o_.api != Api::kAuto) {
    api_ = o_.api;
    api_reason_ = absl::StrCat("--api=", ApiName(api_));
  } else {
    api_ = Api::kCompletions;
    const Completion c = Try(t);
    // A route the target lacks (404, 405, 501), or a 200 in a shape the
    // auditor cannot read: chat, if chat answers. A 404 naming the model
    // (vLLM's model_not_found) is no missing route: the key check says so.
    const bool model_404 =
        c.status == 404 && absl::StrContains(RefusalMessage(c), "model");
    const bool no_route =
        (c.status == 404 && !model_404) || c.status == 405 || c.status == 501;
    const bool unknown_shape = c.status == 200 && !c.usable && !c.http_ok_error;
    if (c.usable) {
      api_reason_ = c.legacy_shape
                        ? "/v1/completions answered in llama.cpp's own shape"
                        : "/v1/completions answered an OpenAI text completion";
      return c;
    }
    if (!no_route && !unknown_shape) {
      // A refused key, an unreachable target, a refusal: CheckKey says so.
      api_reason_ = absl::StrCat("/v1/completions answered HTTP ", c.status);
      return c;
    }
    api_ = Api::kChat;
    api_reason_ = no_route
                      ? absl::StrCat("/v1/completions answered HTTP ", c.status)
                      : "/v1/completions answered in an unknown shape";
  }
  if (api_ != Api::kChat) return std::nullopt;
  // Chat: a target (a hosted reasoning model) may refuse max_tokens or a
  // temperature of 0, naming the field in its 400.
  for (int tries = 0; tries < 2; ++tries) {
    Completion c = Try(t);
    if (c.usable || c.status != 400) return c;
    const std::string why = RefusalMessage(c);
    if (max_tokens_field_ == "max_tokens" &&
        absl::StrContains(why, "max_completion_tokens")) {
      max_tokens_field_ = "max_completion_tokens";
      absl::StrAppend(&api_reason_, "; max_completion_tokens");
    } else if (send_temperature_ && absl::StrContains(why, "temperature")) {
      send_temperature_ = false;
      absl::StrAppend(&api_reason_, "; its default temperature (0 refused)");
    } else {
      return c;
    }
  }
  return std::nullopt;  // the last request went out as the API stood before
}

void Target::MeasureSharedHead() {
  // The median, not the least: a cold cache (a replica's first request)
  // reports fewer, and a unique part that happens to begin as the previous
  // one did (one digit in ten) reports one or two more.
  CacheBuster buster;
  std::vector<int> cached;
  for (int i = 0; i < kSharedHeadSamples; ++i) {
    const Completion c =
        SendAlone(o_.tenants.at(0), BoundaryPrompt(buster.Next(), 1), 1, false);
    if (c.usable && c.cached_tokens >= 0) cached.push_back(c.cached_tokens);
  }
  if (cached.size() * 2 <= static_cast<size_t>(kSharedHeadSamples)) return;
  std::nth_element(cached.begin(), cached.begin() + cached.size() / 2,
                   cached.end());
  shared_head_ = cached[cached.size() / 2];
}

Completion Target::Parse(const ProbeResponse& r, bool stream) const {
  Completion c = ParseCompletion(r, stream);
  if (shared_head_ > 0 && c.cached_tokens >= 0) {
    c.cached_tokens = std::max(0, c.cached_tokens - shared_head_);
    c.shared_head_tokens = shared_head_;
  }
  return c;
}

std::string Target::Body(const std::string& prompt, int max_tokens, bool stream,
                         const json& extra,
                         const std::string& cache_salt) const {
  json j = {{"model", model_}};
  if (api_ == Api::kChat) {
    j["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  } else {
    j["prompt"] = prompt;
  }
  j[max_tokens_field_] = max_tokens;
  if (send_temperature_) j["temperature"] = 0;
  if (stream) {
    j["stream"] = true;
    // Usage in a stream's last chunk (vLLM and others send it only then).
    j["stream_options"] = {{"include_usage", true}};
  }
  if (!cache_salt.empty()) j["cache_salt"] = cache_salt;
  if (!extra.is_object()) return j.dump();
  if (api_ != Api::kChat) {
    j.update(extra);
    return j.dump();
  }
  for (const auto& [key, value] : extra.items()) {
    if (key == "echo") continue;  // no echo in chat
    if (key == "logprobs" && value.is_number_integer()) {
      j["logprobs"] = true;
      if (value.get<int>() > 0) j["top_logprobs"] = value;
      continue;
    }
    j[key] = value;
  }
  return j.dump();
}

ProbeRequest Target::Request(uint64_t id, const AuditTenant& tenant,
                             const std::string& prompt, int max_tokens,
                             bool stream, const json& extra) const {
  ProbeRequest r;
  r.id = id;
  r.url = ApiUrl();
  r.body = Body(prompt, max_tokens, stream, extra, tenant.body_salt);
  r.headers = Headers(tenant);
  r.timeout = o_.request_timeout;
  return r;
}

void Target::Note(const AuditTenant& t, const Completion& c) {
  if (c.not_sent) return;
  spend_.Note(t.name, c);
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
  return SendBeside(t, prompt, max_tokens, stream, extra, {}, 0);
}

Completion Target::SendBeside(const AuditTenant& t, const std::string& prompt,
                              int max_tokens, bool stream, const json& extra,
                              const std::vector<std::string>& fillers,
                              int filler_max_tokens) {
  Completion result;
  if (!down_.ok()) {
    result.error = down_;
    return result;
  }
  const int group = 1 + static_cast<int>(fillers.size());
  for (int retries = 0;; ++retries) {
    if (!spend_.Affordable(group)) {
      spend_.NoteStopped();
      result = Completion();
      result.not_sent = true;
      result.error = absl::ResourceExhaustedError(absl::StrCat(
          "token budget of ", spend_.budget(), " spent (", spend_.spent(),
          " tokens; the largest answer took ", spend_.largest(), ")"));
      return result;
    }
    if (retries > 0) spend_.NoteRetry(t.name);
    MultiClient client(group);
    int sent = 0;
    client.Run(
        [&]() -> std::optional<ProbeRequest> {
          if (sent >= group) return std::nullopt;
          // The fillers first, so the request meets them all in flight.
          const int i = ++sent;
          if (i == group) {
            return Request(0, t, prompt, max_tokens, stream, extra);
          }
          return Request(static_cast<uint64_t>(i), t, fillers[i - 1],
                         filler_max_tokens, false);
        },
        [&](ProbeResponse r) {
          if (r.id == 0) {
            result = Parse(r, stream);
          } else {
            Note(t, Parse(r, false));
          }
        },
        [&] { return sent >= group; });
    Note(t, result);
    if (!IsRateLimited(result) || retries >= kMaxRateLimitRetries) break;
    absl::SleepFor(RetryWait(result, retries));
  }
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
