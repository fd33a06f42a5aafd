#include "auditor/target/answer_logprobs.h"

#include "absl/strings/str_cat.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// A figure: a number, or null (none).
bool ReadFigure(const json& j, std::optional<double>* out) {
  if (j.is_null()) {
    out->reset();
    return true;
  }
  if (!j.is_number()) return false;
  *out = j.get<double>();
  return true;
}

// The legacy object's parallel arrays.
bool TakeLegacy(const json& lp, AnswerLogprobs* out) {
  const json& tokens = lp["tokens"];
  const json* figures =
      lp.contains("token_logprobs") ? &lp["token_logprobs"] : nullptr;
  const json* tops =
      lp.contains("top_logprobs") ? &lp["top_logprobs"] : nullptr;
  if (!tokens.is_array() || figures == nullptr || !figures->is_array() ||
      figures->size() != tokens.size() ||
      (tops != nullptr && !tops->is_null() &&
       (!tops->is_array() || tops->size() != tokens.size()))) {
    return false;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    AnswerLogprob p;
    if (!tokens[i].is_string() || !ReadFigure((*figures)[i], &p.logprob)) {
      return false;
    }
    p.token = tokens[i].get<std::string>();
    if (tops != nullptr && tops->is_array() && (*tops)[i].is_object()) {
      for (const auto& [text, figure] : (*tops)[i].items()) {
        if (!figure.is_number()) return false;
        p.top.emplace_back(text, figure.get<double>());
      }
    }
    out->positions.push_back(std::move(p));
  }
  return true;
}

// Chat's (and llama.cpp's) list of objects.
bool TakeContent(const json& content, AnswerLogprobs* out) {
  if (content.is_null()) return true;
  if (!content.is_array()) return false;
  for (const json& t : content) {
    AnswerLogprob p;
    if (!t.is_object() || !t.contains("token") || !t["token"].is_string() ||
        !t.contains("logprob") || !ReadFigure(t["logprob"], &p.logprob)) {
      return false;
    }
    p.token = t["token"].get<std::string>();
    if (t.contains("top_logprobs") && t["top_logprobs"].is_array()) {
      for (const json& alt : t["top_logprobs"]) {
        if (!alt.is_object() || !alt.contains("token") ||
            !alt["token"].is_string() || !alt.contains("logprob") ||
            !alt["logprob"].is_number()) {
          return false;
        }
        p.top.emplace_back(alt["token"].get<std::string>(),
                           alt["logprob"].get<double>());
      }
    }
    out->positions.push_back(std::move(p));
  }
  return true;
}

}  // namespace

void TakeChoiceLogprobs(const json& choice, AnswerLogprobs* out) {
  if (!choice.is_object() || !choice.contains("logprobs")) return;
  const json& lp = choice["logprobs"];
  if (lp.is_null()) return;
  out->present = true;
  bool ok = false;
  if (lp.is_object() && lp.contains("tokens")) {
    ok = TakeLegacy(lp, out);
  } else if (lp.is_object() && lp.contains("content")) {
    ok = TakeContent(lp["content"], out);
  }
  // (Its keys are not named: a shape we do not know may key by token
  // text, and evidence holds no answer text.)
  if (!ok && out->malformed.empty()) {
    out->malformed = absl::StrCat("a logprobs ", lp.type_name(),
                                  " of no known shape (neither `tokens` nor "
                                  "`content`, or a figure not a number)");
  }
}

}  // namespace kvcanary::auditor
