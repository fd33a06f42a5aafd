#include "auditor/completion.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

int StatusOfType(absl::string_view type) {
  const std::string t = absl::AsciiStrToLower(type);
  auto has = [&t](absl::string_view s) { return absl::StrContains(t, s); };
  if (has("auth") && !has("author")) return 401;
  if (has("permission") || has("forbidden") || has("author")) return 403;
  if (has("not_found") || has("notfound") || has("not found")) return 404;
  if (has("rate") || has("overload") || has("too_many") || has("busy")) {
    return 429;
  }
  if (has("validation")) return 422;  // TGI's error_type
  if (has("invalid") || has("bad_request") || has("badrequest") ||
      has("context") || has("length") || has("exceed")) {
    return 400;
  }
  return 500;
}

// The error object of an answer, or null: `{"error": ...}` at the top.
const json* ErrorOf(const json& j) {
  if (!j.is_object()) return nullptr;
  auto it = j.find("error");
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

// Accumulates a completion object (a whole body or one stream chunk) into
// *c. False if it is not one: neither `choices` nor `usage`.
bool Take(const json& j, Completion* c) {
  if (!j.is_object()) return false;
  const bool has_choices = j.contains("choices") && j["choices"].is_array();
  const bool has_usage = j.contains("usage") && j["usage"].is_object();
  if (!has_choices && !has_usage) return false;
  if (c->response_id.empty() && j.contains("id") && j["id"].is_string()) {
    c->response_id = j["id"].get<std::string>();
  }
  if (has_choices) {
    for (const json& choice : j["choices"]) {
      if (!choice.is_object()) continue;
      if (choice.contains("text") && choice["text"].is_string()) {
        c->text += choice["text"].get<std::string>();
      } else if (choice.contains("delta") && choice["delta"].is_object() &&
                 choice["delta"].contains("content") &&
                 choice["delta"]["content"].is_string()) {
        c->text += choice["delta"]["content"].get<std::string>();
      } else if (choice.contains("message") && choice["message"].is_object() &&
                 choice["message"].contains("content") &&
                 choice["message"]["content"].is_string()) {
        c->text += choice["message"]["content"].get<std::string>();
      }
    }
  }
  if (has_usage) {
    const json& u = j["usage"];
    // The last non-zero count: Ollama sends a zero usage on every chunk
    // before the real one.
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer() &&
        (u["prompt_tokens"].get<int>() > 0 || c->prompt_tokens < 0)) {
      c->prompt_tokens = u["prompt_tokens"].get<int>();
    }
    if (u.contains("prompt_tokens_details") &&
        u["prompt_tokens_details"].is_object() &&
        u["prompt_tokens_details"].contains("cached_tokens") &&
        u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) {
      c->cached_tokens = u["prompt_tokens_details"]["cached_tokens"].get<int>();
    }
  }
  return true;
}

// Marks *c as an error reported inside an HTTP 200 answer.
void SetInBandError(const json& error, const json& outer, Completion* c) {
  c->http_ok_error = true;
  c->status = ErrorObjectStatus(error, outer);
  std::string message;
  if (error.is_object() && error.contains("message") &&
      error["message"].is_string()) {
    message = error["message"].get<std::string>();
  } else if (error.is_string()) {
    message = error.get<std::string>();
  }
  if (message.size() > 200) message.resize(200);
  c->error = absl::FailedPreconditionError(
      absl::StrCat("an error inside an HTTP 200 answer (status ", c->status,
                   message.empty() ? "" : ": ", message, ")"));
}

}  // namespace

int ErrorObjectStatus(const json& error, const json& outer) {
  auto code_of = [](const json& j) -> int {
    if (!j.is_object() || !j.contains("code")) return 0;
    const json& code = j["code"];
    int v = 0;
    if (code.is_number_integer()) v = code.get<int>();
    if (code.is_string() && !absl::SimpleAtoi(code.get<std::string>(), &v)) {
      v = 0;
    }
    return v >= 400 && v <= 599 ? v : 0;
  };
  auto type_of = [](const json& j) -> std::string {
    if (!j.is_object()) return "";
    for (const char* key : {"type", "error_type"}) {
      if (j.contains(key) && j[key].is_string()) return j[key];
    }
    if (j.contains("code") && j["code"].is_string()) return j["code"];
    return "";
  };
  if (int c = code_of(error)) return c;
  if (int c = code_of(outer)) return c;
  std::string type = type_of(error);
  if (type.empty()) type = type_of(outer);
  if (type.empty() && error.is_object() && error.contains("message") &&
      error["message"].is_string()) {
    type = error["message"].get<std::string>();
  }
  if (type.empty() && error.is_string()) type = error.get<std::string>();
  return StatusOfType(type);
}

Completion ParseCompletion(const ProbeResponse& r, bool stream) {
  Completion c;
  c.total_ms = absl::ToDoubleMilliseconds(r.total);
  c.ttft_ms = absl::ToDoubleMilliseconds(r.first_byte);
  if (auto it = r.headers.find(std::string(kEngineRequestIdHeader));
      it != r.headers.end()) {
    uint64_t id = 0;
    if (absl::SimpleAtoi(it->second, &id)) c.engine_request = id;
  }
  if (!r.transport.ok()) {
    c.error = r.transport;
    return c;
  }
  c.status = r.status;
  if (r.status != 200) {
    const json j = json::parse(r.body, nullptr, false);
    if (const json* e = ErrorOf(j)) {
      c.error = absl::FailedPreconditionError(absl::StrCat(
          "HTTP ", r.status, ": ", json(*e).dump().substr(0, 200)));
    }
    return c;
  }
  // A streamed request answered with one JSON object (an error, or a server
  // that does not stream) is read as a plain body.
  if (!stream ||
      absl::StartsWith(absl::StripLeadingAsciiWhitespace(r.body), "{")) {
    const json j = json::parse(r.body, nullptr, false);
    if (const json* e = ErrorOf(j)) {
      SetInBandError(*e, j, &c);
      return c;
    }
    if (!Take(j, &c)) {
      c.error = absl::DataLossError(
          stream ? "a streamed request answered without an SSE stream or a "
                   "completion"
                 : "a 200 without a completion in its body");
      return c;
    }
    c.usable = true;
    return c;
  }
  bool done = false, any = false;
  std::string event;  // the SSE `event:` field of the event being read
  for (absl::string_view line : absl::StrSplit(r.body, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty()) {
      event.clear();  // a blank line ends an SSE event
      continue;
    }
    if (absl::ConsumePrefix(&line, "event:")) {
      event = std::string(absl::StripAsciiWhitespace(line));
      continue;
    }
    const bool error_line = absl::ConsumePrefix(&line, "error:");
    if (!error_line && !absl::ConsumePrefix(&line, "data:")) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!error_line && line == "[DONE]") {
      done = true;
      continue;
    }
    const json j = json::parse(line, nullptr, false);
    if (error_line || event == "error") {
      const json* inner = ErrorOf(j);
      SetInBandError(inner != nullptr ? *inner : j, j, &c);
      return c;
    }
    if (const json* e = ErrorOf(j)) {
      SetInBandError(*e, j, &c);
      return c;
    }
    if (!Take(j, &c)) {
      c.error = absl::DataLossError("a malformed stream event");
      return c;
    }
    any = true;
  }
  if (!done) {
    c.error = absl::DataLossError("a stream that did not end with [DONE]");
    return c;
  }
  if (!any) {
    // TGI's chat stream drops a validation error and sends only [DONE].
    c.error = absl::DataLossError(
        "a stream with [DONE] but no completion chunk: an error the server "
        "dropped, never an empty answer");
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
