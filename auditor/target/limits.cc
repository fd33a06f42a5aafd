#include "auditor/target/limits.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// The integer at `path` (keys) in `j`, or 0.
int IntAt(const json& j, std::initializer_list<const char*> path) {
  const json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return 0;
    at = &(*at)[key];
  }
  if (at->is_number_integer() && at->get<int64_t>() > 0 &&
      at->get<int64_t>() < (1ll << 31)) {
    return at->get<int>();
  }
  return 0;
}

json GetJson(const HttpClient& http, const std::string& url,
             const std::vector<std::string>& headers, absl::Duration timeout) {
  absl::StatusOr<HttpResponse> r = http.Get(url, headers, timeout);
  if (!r.ok() || r->status != 200) return json();
  return json::parse(r->body, nullptr, false);
}

// Fills *out from a context length (prompt + generated) read at `where`.
void FromContext(int context, const std::string& where, TargetLimit* out) {
  out->context_tokens = context;
  out->prompt_tokens = std::max(0, context - kBoundaryMaxTokens);
  out->refuse_above = context;
  out->source = "advertised";
  out->where = absl::StrCat(where, " (context ", context, " tokens, minus ",
                            kBoundaryMaxTokens, " to generate)");
}

// Fills *out from a stated prompt limit (and the context, 0 if unknown).
void FromPromptLimit(int prompt, int context, const std::string& where,
                     TargetLimit* out) {
  out->prompt_tokens = out->refuse_above = prompt;
  out->context_tokens = context;
  if (context > 0) {
    out->prompt_tokens = std::min(prompt, context - kBoundaryMaxTokens);
  }
  out->source = "advertised";
  out->where = where;
}

// Each XLimit below reads where server X advertises its limit: fills *out
// and returns true if it is there, else leaves *out alone.

// kvcanary's prompt limit, or vLLM's and SGLang's context, in the model
// list.
bool ModelListLimit(const json& model_entry, TargetLimit* out) {
  // kvcanary: a prompt limit of its own, below the context.
  if (int p = IntAt(model_entry, {"max_prompt_tokens"})) {
    FromPromptLimit(p, IntAt(model_entry, {"max_model_len"}),
                    "/v1/models max_prompt_tokens", out);
    return true;
  }
  // vLLM, SGLang: the context length in the model list.
  if (int c = IntAt(model_entry, {"max_model_len"})) {
    FromContext(c, "/v1/models max_model_len", out);
    return true;
  }
  return false;
}

// llama.cpp's server: the slot context in /props.
bool LlamaCppLimit(const HttpClient& http, const std::string& target,
                   const std::vector<std::string>& headers,
                   absl::Duration timeout, TargetLimit* out) {
  const json props = GetJson(http, target + "/props", headers, timeout);
  if (int c = IntAt(props, {"default_generation_settings", "n_ctx"})) {
    FromContext(c, "/props default_generation_settings.n_ctx", out);
    return true;
  }
  return false;
}

// TGI: a prompt limit of its own in /info.
bool TgiLimit(const HttpClient& http, const std::string& target,
              const std::vector<std::string>& headers, absl::Duration timeout,
              TargetLimit* out) {
  const json info = GetJson(http, target + "/info", headers, timeout);
  int p = IntAt(info, {"max_input_tokens"});
  const char* field = "max_input_tokens";
  if (p == 0) {
    p = IntAt(info, {"max_input_length"});
    field = "max_input_length";
  }
  if (p > 0) {
    FromPromptLimit(p, IntAt(info, {"max_total_tokens"}),
                    absl::StrCat("/info ", field), out);
    return true;
  }
  return false;
}

// SGLang: its server info (the model list's max_model_len comes first).
bool SglangLimit(const HttpClient& http, const std::string& target,
                 const std::vector<std::string>& headers,
                 absl::Duration timeout, TargetLimit* out) {
  const json info =
      GetJson(http, target + "/get_server_info", headers, timeout);
  if (int p = IntAt(info, {"max_req_input_len"})) {
    FromPromptLimit(p, IntAt(info, {"context_length"}),
                    "/get_server_info max_req_input_len", out);
    return true;
  }
  if (int c = IntAt(info, {"context_length"})) {
    FromContext(c, "/get_server_info context_length", out);
    return true;
  }
  return false;
}

// Ollama: num_ctx, when a Modelfile set it, in /api/show's parameters (a
// text of "name value" lines). Its model_info context_length is the
// training context, not the window: never used.
bool OllamaLimit(const HttpClient& http, const std::string& target,
                 const std::vector<std::string>& headers,
                 const std::string& model, absl::Duration timeout,
                 TargetLimit* out) {
  std::vector<std::string> post = headers;
  post.push_back("Content-Type: application/json");
  auto r = http.Post(target + "/api/show", json{{"model", model}}.dump(), post,
                     timeout);
  if (!r.ok() || r->status != 200) return false;
  const json show = json::parse(r->body, nullptr, false);
  if (!show.is_object() || !show.contains("parameters") ||
      !show["parameters"].is_string()) {
    return false;
  }
  for (absl::string_view line :
       absl::StrSplit(show["parameters"].get<std::string>(), '\n')) {
    std::vector<absl::string_view> kv =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    int c = 0;
    if (kv.size() == 2 && kv[0] == "num_ctx" && absl::SimpleAtoi(kv[1], &c) &&
        c > 0) {
      FromContext(c, "/api/show parameters num_ctx", out);
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<ModelEntry> DiscoverModel(
    const HttpClient& http, const std::string& target,
    const std::vector<std::string>& headers, const std::string& tenant,
    const std::string& model, absl::Duration timeout) {
  auto res = http.Get(target + "/v1/models", headers, timeout);
  if (!res.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "target ", target, " unreachable: ", res.status().message()));
  }
  if (res->status == 401 || res->status == 403) {
    return absl::PermissionDeniedError(absl::StrCat(
        "target ", target, " refused tenant '", tenant, "' key (HTTP ",
        res->status, " on /v1/models): check the tenants file"));
  }
  const json j = json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object() || !j.contains("data") ||
      !j["data"].is_array() || j["data"].empty() || !j["data"][0].is_object() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "target ", target, "/v1/models answered HTTP ", res->status,
        " without a model list: not an OpenAI-compatible API"));
  }
  ModelEntry out;
  if (model.empty()) {
    out.entry = j["data"][0];
    out.id = out.entry["id"].get<std::string>();
    return out;
  }
  out.id = model;
  for (const json& m : j["data"]) {
    if (m.is_object() && m.contains("id") && m["id"].is_string() &&
        m["id"].get<std::string>() == model) {
      out.entry = m;
    }
  }
  return out;
}

TargetLimit AdvertisedLimit(const HttpClient& http, const std::string& target,
                            const std::vector<std::string>& headers,
                            const json& model_entry, const std::string& model,
                            absl::Duration timeout) {
  TargetLimit out;
  // The first place that advertises a limit, in this order, fills `out`.
  if (ModelListLimit(model_entry, &out) ||
      LlamaCppLimit(http, target, headers, timeout, &out) ||
      TgiLimit(http, target, headers, timeout, &out) ||
      SglangLimit(http, target, headers, timeout, &out) ||
      OllamaLimit(http, target, headers, model, timeout, &out)) {
    return out;
  }
  out.source = "unknown";
  out.where = "advertised nowhere the auditor knows (docs/targets.md)";
  return out;
}

LadderResult MeasureLimit(const std::function<LadderAnswer(int units)>& send,
                          int base_tokens, int unit_tokens, int tolerance,
                          int max_tokens) {
  LadderResult r;
  enum Kind { kWhole, kRefused, kTruncated, kOther };
  auto step = [&](int units) {
    LadderStep s;
    s.units = units;
    s.predicted = base_tokens + units * unit_tokens;
    s.answer = send(units);
    r.steps.push_back(s);
    const LadderAnswer& a = s.answer;
    if (a.status == 200) {
      // A 200 without a count (garbage, a proxy's page) proves nothing.
      if (a.prompt_tokens < 0) return kOther;
      if (a.prompt_tokens < s.predicted - tolerance) {
        if (!r.truncates) r.truncated = s;
        r.truncates = true;
        return kTruncated;
      }
      r.largest_units = std::max(r.largest_units, units);
      return kWhole;
    }
    if (a.status == 400 || a.status == 413 || a.status == 422) return kRefused;
    return kOther;
  };
  int lo = 0, hi = 0;
  int refused_status = 0;
  for (int units = 1;; units *= 2) {
    if (base_tokens + units * unit_tokens > max_tokens) break;
    const Kind k = step(units);
    if (k == kWhole) {
      lo = units;
      continue;
    }
    if (k == kOther) {
      r.refused_other = true;
      r.how = absl::StrCat("the ladder stopped at ", r.steps.back().predicted,
                           " tokens: HTTP ", r.steps.back().answer.status);
      return r;
    }
    if (k == kRefused) refused_status = r.steps.back().answer.status;
    hi = units;
    break;
  }
  if (hi == 0) {
    r.how =
        absl::StrCat("no refusal or truncation up to ", max_tokens, " tokens");
    r.limit = lo > 0 ? base_tokens + lo * unit_tokens : 0;
    return r;
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    const Kind k = step(mid);
    if (k == kWhole) {
      lo = mid;
    } else if (k == kOther) {
      r.refused_other = true;
      r.how = absl::StrCat("the ladder stopped at ", r.steps.back().predicted,
                           " tokens: HTTP ", r.steps.back().answer.status);
      return r;
    } else {
      if (k == kRefused) refused_status = r.steps.back().answer.status;
      hi = mid;
    }
  }
  r.found = true;
  const int first_bad = base_tokens + hi * unit_tokens;
  if (r.truncates) {
    r.limit = r.truncated.answer.prompt_tokens;
    r.how = absl::StrCat("usage.prompt_tokens stops growing at ", r.limit,
                         " (a prompt of ", r.truncated.predicted,
                         " tokens answered with HTTP 200)");
  } else {
    r.limit = lo > 0 ? base_tokens + lo * unit_tokens : 0;
    r.how = absl::StrCat("refused (HTTP ", refused_status, ") from ", first_bad,
                         " tokens; ", r.limit, " accepted");
  }
  return r;
}

nlohmann::json LadderResult::ToJson() const {
  nlohmann::json out_steps = nlohmann::json::array();
  for (const LadderStep& s : steps) {
    out_steps.push_back({{"units", s.units},
                         {"predicted", s.predicted},
                         {"status", s.answer.status},
                         {"prompt_tokens", s.answer.prompt_tokens}});
  }
  return {{"found", found},
          {"limit", limit},
          {"truncates", truncates},
          {"how", how},
          {"steps", out_steps}};
}

}  // namespace kvcanary::auditor
