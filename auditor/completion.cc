#include "auditor/completion.h"

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

using json = nlohmann::json;

Completion ParseCompletion(const ProbeResponse& r, bool stream) {
  Completion c;
  c.total_ms = absl::ToDoubleMilliseconds(r.total);
  c.ttft_ms = absl::ToDoubleMilliseconds(r.first_byte);
  if (!r.transport.ok()) {
    c.error = r.transport;
    return c;
  }
  c.status = r.status;
  if (r.status != 200) return c;
  auto take = [&c](const json& j) {
    if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array())
      return false;
    for (const json& choice : j["choices"]) {
      if (choice.contains("text") && choice["text"].is_string()) {
        c.text += choice["text"].get<std::string>();
      } else if (choice.contains("message") &&
                 choice["message"].contains("content") &&
                 choice["message"]["content"].is_string()) {
        c.text += choice["message"]["content"].get<std::string>();
      }
    }
    if (j.contains("usage") && j["usage"].is_object() &&
        j["usage"].contains("prompt_tokens") &&
        j["usage"]["prompt_tokens"].is_number_integer()) {
      c.prompt_tokens = j["usage"]["prompt_tokens"].get<int>();
    }
    return true;
  };
  if (!stream) {
    const json j = json::parse(r.body, nullptr, false);
    if (!take(j)) {
      c.error = absl::DataLossError("a 200 without a completion in its body");
      return c;
    }
    c.usable = true;
    return c;
  }
  bool done = false, any = false;
  for (absl::string_view line : absl::StrSplit(r.body, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "data: ")) continue;
    if (line == "[DONE]") {
      done = true;
      continue;
    }
    const json j = json::parse(line, nullptr, false);
    if (!take(j)) {
      c.error = absl::DataLossError("a malformed stream event");
      return c;
    }
    any = true;
  }
  if (!done || !any) {
    c.error = absl::DataLossError("a stream that did not end with [DONE]");
    return c;
  }
  c.usable = true;
  return c;
}

std::string Outcome(const Completion& c) {
  if (!c.error.ok() && c.status == 0) return "transport_error";
  if (c.status == 200) return c.usable ? "ok" : "bad_response";
  if (c.status >= 500) return "http_5xx";
  return "http_4xx";
}

}  // namespace kvcanary::auditor
