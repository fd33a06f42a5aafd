#include "engine/nodes/openai_logprobs.h"

namespace kvcanary::engine {
namespace {

using ordered_json = nlohmann::ordered_json;

ordered_json Bytes(const std::string& text) {
  ordered_json bytes = ordered_json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

ordered_json Number(std::optional<float> f) {
  return f.has_value() ? ordered_json(static_cast<double>(*f))
                       : ordered_json(nullptr);
}

}  // namespace

ordered_json CompletionLogprobsJson(const std::vector<LogprobEntry>& entries,
                                    size_t text_offset) {
  ordered_json tokens = ordered_json::array(), logprobs = ordered_json::array(),
               tops = ordered_json::array(), offsets = ordered_json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.token);
    logprobs.push_back(Number(e.logprob));
    offsets.push_back(text_offset);
    text_offset += e.token.size();
    if (!e.logprob.has_value()) {
      tops.push_back(nullptr);
      continue;
    }
    ordered_json top = ordered_json::object();
    for (const auto& [text, lp] : e.top) {
      if (!top.contains(text)) top[text] = static_cast<double>(lp);
    }
    if (!top.contains(e.token)) top[e.token] = static_cast<double>(*e.logprob);
    tops.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

ordered_json ChatLogprobsJson(const std::vector<LogprobEntry>& entries) {
  ordered_json content = ordered_json::array();
  for (const LogprobEntry& e : entries) {
    ordered_json top = ordered_json::array();
    for (const auto& [text, lp] : e.top) {
      top.push_back({{"token", text},
                     {"logprob", static_cast<double>(lp)},
                     {"bytes", Bytes(text)}});
    }
    content.push_back({{"token", e.token},
                       {"logprob", Number(e.logprob)},
                       {"bytes", Bytes(e.token)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

}  // namespace kvcanary::engine
