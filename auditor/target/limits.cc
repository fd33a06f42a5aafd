#include "auditor/target/limits.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "auditor/target/completion.h"
#include "auditor/target/info_reads.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

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

CountFate JudgeCount(int predicted, int reported, int tolerance) {
  if (reported < 0) return CountFate::kUnknown;
  const int diff = reported - predicted;
  if (diff < -tolerance) return CountFate::kCut;
  if (diff > tolerance) return CountFate::kOver;
  return CountFate::kWhole;
}

const char* CountFateName(CountFate fate) {
  switch (fate) {
    case CountFate::kWhole:
      return "whole";
    case CountFate::kCut:
      return "cut";
    case CountFate::kOver:
      return "over";
    case CountFate::kUnknown:
      break;
  }
  return "unknown";
}

namespace {

bool Bad(const std::string& fate) { return fate == "cut" || fate == "refused"; }

// Sends one prompt of `tokens` and judges it against its prediction.
class Measurement {
 public:
  Measurement(const LimitProbe& send, const LimitMeasureOptions& o)
      : send_(send), o_(o) {}

  LadderResult Run() {
    if (!Ladder() || !Bisect() || !Recheck()) return std::move(r_);
    r_.found = true;
    const LadderStep& u = upper_step_;
    r_.how = absl::StrCat(
        "processed whole up to ", r_.limit, " prompt tokens; ",
        u.fate == "cut" ? absl::StrCat("cut from ", r_.upper, " (a prompt of ",
                                       r_.upper, " tokens came back as ",
                                       u.answer.prompt_tokens, ", HTTP 200)")
                        : absl::StrCat("refused (HTTP ", u.answer.status,
                                       ") from ", r_.upper),
        r_.upper - r_.limit > 1
            ? absl::StrCat("; ", r_.limit + 1, " to ", r_.upper - 1,
                           " not tried (the filler's grain)")
            : "",
        "; both bounds held when sent again");
    return std::move(r_);
  }

 private:
  // Sends a prompt of about `tokens` and judges it; nullopt if none was
  // built.
  std::optional<LadderStep> Step(int tokens) {
    LadderStep s = send_(tokens);
    if (s.predicted < 0) return std::nullopt;
    const LadderAnswer& a = s.answer;
    const CountFate count =
        JudgeCount(s.predicted, a.prompt_tokens, o_.tolerance);
    if (a.status == 200 &&
        (count == CountFate::kWhole || count == CountFate::kCut)) {
      s.fate = CountFateName(count);
    } else if (IsRefusal(a.status)) {
      s.fate = "refused";
      r_.refused_status = a.status;
    } else {
      s.fate = "other";
    }
    if (s.fate == "cut" && !r_.truncates) {
      r_.truncates = true;
      r_.truncated = s;
    }
    r_.steps.push_back(s);
    return s;
  }

  // Notes a step's bound; false (and `how`) for an answer that ends it.
  bool Note(const LadderStep& s) {
    if (s.fate == "whole") {
      r_.limit = std::max(r_.limit, s.predicted);
    } else if (Bad(s.fate)) {
      if (r_.upper == 0 || s.predicted < r_.upper) {
        r_.upper = s.predicted;
        upper_step_ = s;
      }
    } else {
      r_.refused_other = true;
      r_.how = absl::StrCat(
          "the measurement stopped at a prompt of ", s.predicted,
          " tokens: HTTP ", s.answer.status,
          s.answer.status == 200
              ? absl::StrCat(" counting ", s.answer.prompt_tokens, " tokens")
              : "");
      return false;
    }
    return true;
  }

  bool Ladder() {
    for (int64_t step = o_.grain_tokens;
         o_.shortest_tokens + step <= o_.max_tokens; step *= 2) {
      const std::optional<LadderStep> s =
          Step(o_.shortest_tokens + static_cast<int>(step));
      if (!s.has_value()) break;
      if (!Note(*s)) return false;
      if (Bad(s->fate)) return true;
    }
    r_.how = absl::StrCat("no refusal or truncation up to ", o_.max_tokens,
                          " tokens");
    return false;
  }

  bool Bisect() {
    while (true) {
      const int floor = std::max(r_.limit, o_.shortest_tokens);
      if (r_.upper - floor <= 1) return true;
      const std::optional<LadderStep> s = Step(floor + (r_.upper - floor) / 2);
      // The filler cannot build a prompt between the bounds: its grain.
      if (!s.has_value() || s->predicted <= r_.limit ||
          s->predicted >= r_.upper) {
        return true;
      }
      if (!Note(*s)) return false;
    }
  }

  // Both bounds once more, with fresh prompts of the same lengths.
  bool Recheck() {
    const std::optional<LadderStep> low =
        r_.limit > 0 ? Step(r_.limit) : std::nullopt;
    const std::optional<LadderStep> high = Step(r_.upper);
    std::string what;
    if (r_.limit > 0 && (!low.has_value() || low->fate != "whole")) {
      what =
          absl::StrCat(r_.limit, " tokens, processed whole before, came back ",
                       low.has_value() ? low->fate : "unbuilt");
    } else if (!high.has_value() || !Bad(high->fate)) {
      what = absl::StrCat(r_.upper, " tokens, ", upper_step_.fate,
                          " before, came back ",
                          high.has_value() ? high->fate : "unbuilt");
    }
    if (what.empty()) return true;
    r_.how = absl::StrCat(
        "processed whole up to ", r_.limit, " and not from ", r_.upper,
        ", but the bounds did not hold when sent again (", what, ")");
    return false;
  }

  const LimitProbe& send_;
  const LimitMeasureOptions& o_;
  LadderResult r_;
  LadderStep upper_step_;
};

}  // namespace

LadderResult MeasureLimit(const LimitProbe& send,
                          const LimitMeasureOptions& options) {
  return Measurement(send, options).Run();
}

nlohmann::json LadderResult::ToJson() const {
  nlohmann::json out_steps = nlohmann::json::array();
  for (const LadderStep& s : steps) {
    out_steps.push_back({{"predicted", s.predicted},
                         {"status", s.answer.status},
                         {"prompt_tokens", s.answer.prompt_tokens},
                         {"fate", s.fate}});
  }
  return {{"found", found},         {"limit", limit}, {"upper", upper},
          {"truncates", truncates}, {"how", how},     {"steps", out_steps}};
}

}  // namespace kvcanary::auditor
