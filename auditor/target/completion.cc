#include "auditor/target/completion.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "auditor/target/rate_limit.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// The longest prefix of `s` of at most `bytes` that does not end inside a
// UTF-8 sequence (evidence and reports refuse invalid UTF-8).
std::string Utf8Prefix(const std::string& s, size_t bytes) {
  if (s.size() <= bytes) return s;
  size_t end = bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

// The status an error's `type` (or message) names, matched word by word
// ("rate_limit_exceeded", "RateLimitError", "exceed_context_size_error"),
// so "generation" is not a rate and "unauthorized" not a permission.
int StatusOfType(absl::string_view type) {
  const std::vector<std::string> words =
      absl::StrSplit(absl::AsciiStrToLower(type),
                     absl::ByAnyChar(" _-.:,;/()[]{}\"'"), absl::SkipEmpty());
  auto starts = [](const std::string& w, absl::string_view p) {
    return absl::StartsWith(w, p);
  };
  auto word_then = [&words](absl::string_view a, absl::string_view b) {
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      if (words[i] == a && absl::StartsWith(words[i + 1], b)) return true;
    }
    return false;
  };
  for (const std::string& w : words) {
    if (starts(w, "authentication") || starts(w, "unauthenticated") ||
        starts(w, "unauthorized") || w == "auth") {
      return 401;
    }
  }
  for (const std::string& w : words) {
    if (starts(w, "permission") || starts(w, "forbidden")) return 403;
  }
  if (word_then("not", "found")) return 404;
  for (const std::string& w : words) {
    if (starts(w, "notfound")) return 404;
  }
  if (word_then("rate", "limit") || word_then("too", "many")) return 429;
  for (const std::string& w : words) {
    if (starts(w, "ratelimit") || starts(w, "overload") || w == "busy") {
      return 429;
    }
  }
  for (const std::string& w : words) {
    if (w == "validation") return 422;  // TGI's error_type
  }
  for (const std::string& w : words) {
    if (starts(w, "invalid") || starts(w, "badrequest") || w == "bad" ||
        w == "context" || w == "length" || starts(w, "exceed") || w == "long") {
      return 400;
    }
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

// What one object (a whole body or one stream chunk) held.
enum class Taken {
  kNone,    // neither `choices` nor `usage`: not a completion object
  kUsage,   // usage (or an empty choice list) only
  kChoice,  // at least one choice carrying a text, delta or message string
};

// llama.cpp's `timings` (on the last chunk of a stream, or the body):
// prompt_n is the prompt tokens it evaluated.
void TakeTimings(const json& j, Completion* c) {
  auto t = j.find("timings");
  if (t == j.end() || !t->is_object()) return;
  auto n = t->find("prompt_n");
  if (n != t->end() && n->is_number_integer() && n->get<int64_t>() >= 0 &&
      n->get<int64_t>() < (1ll << 31)) {
    c->evaluated_tokens = n->get<int>();
  }
}

// Accumulates a completion object into *c.
Taken Take(const json& j, Completion* c) {
  if (!j.is_object()) return Taken::kNone;
  TakeTimings(j, c);
  const bool has_choices = j.contains("choices") && j["choices"].is_array();
  const bool has_usage = j.contains("usage") && j["usage"].is_object();
  // llama.cpp's own shape: {"content", "stop", "tokens_evaluated",
  // "tokens_predicted", "timings", ...}, one object per stream chunk too.
  if (!has_choices && !has_usage && j.contains("content") &&
      j["content"].is_string() && j.contains("stop") &&
      j["stop"].is_boolean()) {
    c->legacy_shape = true;
    c->text += j["content"].get<std::string>();
    if (j.contains("tokens_evaluated") &&
        j["tokens_evaluated"].is_number_integer() &&
        j["tokens_evaluated"].get<int>() > 0) {
      c->prompt_tokens = j["tokens_evaluated"].get<int>();
    }
    if (j.contains("tokens_predicted") &&
        j["tokens_predicted"].is_number_integer() &&
        j["tokens_predicted"].get<int>() > 0) {
      c->completion_tokens = j["tokens_predicted"].get<int>();
    }
    if (j.contains("id_slot") && j["id_slot"].is_number_integer() &&
        c->response_id.empty()) {
      c->response_id = absl::StrCat("slot-", j["id_slot"].get<int>());
    }
    return Taken::kChoice;
  }
  if (!has_choices && !has_usage) return Taken::kNone;
  Taken taken = Taken::kUsage;
  if (c->response_id.empty() && j.contains("id") && j["id"].is_string()) {
    c->response_id = j["id"].get<std::string>();
  }
  if (has_choices) {
    for (const json& choice : j["choices"]) {
      if (!choice.is_object()) continue;
      const json* text = nullptr;
      if (choice.contains("text") && choice["text"].is_string()) {
        text = &choice["text"];
      } else if (choice.contains("delta") && choice["delta"].is_object() &&
                 choice["delta"].contains("content") &&
                 choice["delta"]["content"].is_string()) {
        text = &choice["delta"]["content"];
      } else if (choice.contains("message") && choice["message"].is_object() &&
                 choice["message"].contains("content") &&
                 choice["message"]["content"].is_string()) {
        text = &choice["message"]["content"];
      }
      if (text != nullptr) {
        c->text += text->get<std::string>();
        taken = Taken::kChoice;
      }
      TakeChoiceLogprobs(choice, &c->logprobs);
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
    if (u.contains("completion_tokens") &&
        u["completion_tokens"].is_number_integer() &&
        (u["completion_tokens"].get<int>() > 0 || c->completion_tokens < 0)) {
      c->completion_tokens = u["completion_tokens"].get<int>();
    }
    if (u.contains("prompt_tokens_details") &&
        u["prompt_tokens_details"].is_object() &&
        u["prompt_tokens_details"].contains("cached_tokens") &&
        u["prompt_tokens_details"]["cached_tokens"].is_number_integer()) {
      c->cached_tokens = u["prompt_tokens_details"]["cached_tokens"].get<int>();
      c->cached_from = CachedTokensFrom::kPromptTokensDetails;
    }
  }
  return taken;
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
  message = Utf8Prefix(message, 200);
  c->error = absl::FailedPreconditionError(
      absl::StrCat("an error inside an HTTP 200 answer (status ", c->status,
                   message.empty() ? "" : ": ", message, ")"));
}

// A non-200 answer: its error object, if any, as c->error.
void ReadErrorBody(const ProbeResponse& r, Completion* c) {
  const json j = json::parse(r.body, nullptr, false);
  if (const json* e = ErrorOf(j)) {
    c->error = absl::FailedPreconditionError(absl::StrCat(
        "HTTP ", r.status, ": ",
        Utf8Prefix(
            json(*e).dump(-1, ' ', false, json::error_handler_t::replace),
            200)));
  }
}

// A 200 answer's body as one JSON object: an error or a completion.
void ReadPlainBody(const std::string& body, bool stream, Completion* c) {
  const json j = json::parse(body, nullptr, false);
  if (const json* e = ErrorOf(j)) {
    SetInBandError(*e, j, c);
    return;
  }
  if (Take(j, c) != Taken::kChoice) {
    c->error = absl::DataLossError(
        stream ? "a streamed request answered without an SSE stream or a "
                 "completion"
               : "a 200 without a completion (no choice with text) in its "
                 "body");
    return;
  }
  c->usable = true;
}

// A 200 answer's body as an SSE stream of chunks ending with [DONE].
void ReadStream(const std::string& body, Completion* c) {
  bool done = false, any = false;
  std::string event;  // the SSE `event:` field of the event being read
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
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
      SetInBandError(inner != nullptr ? *inner : j, j, c);
      return;
    }
    if (const json* e = ErrorOf(j)) {
      SetInBandError(*e, j, c);
      return;
    }
    const Taken taken = Take(j, c);
    if (taken == Taken::kNone) {
      c->error = absl::DataLossError("a malformed stream event");
      return;
    }
    any = any || taken == Taken::kChoice;
    // llama.cpp's own stream ends with a chunk whose "stop" is true, not
    // with [DONE].
    if (c->legacy_shape && j.value("stop", false)) done = true;
  }
  if (!done) {
    c->error = absl::DataLossError("a stream that did not end with [DONE]");
    c->dropped_stream = true;
    return;
  }
  if (!any) {
    c->dropped_stream = true;
    // TGI's chat stream drops a validation error and sends only [DONE].
    c->error = absl::DataLossError(
        "a stream with [DONE] but no chunk with a choice: an error the "
        "server dropped, never an empty answer");
    return;
  }
  c->usable = true;
}

// Cached tokens from llama.cpp's timings where usage said nothing of them.
void CachedFromTimings(Completion* c) {
  if (c->cached_from != CachedTokensFrom::kNone || c->evaluated_tokens < 0 ||
      c->prompt_tokens < 0) {
    return;
  }
  c->cached_tokens = std::max(0, c->prompt_tokens - c->evaluated_tokens);
  c->cached_from = CachedTokensFrom::kTimings;
}

}  // namespace

const char* CachedTokensFromName(CachedTokensFrom from) {
  switch (from) {
    case CachedTokensFrom::kPromptTokensDetails:
      return "usage.prompt_tokens_details.cached_tokens";
    case CachedTokensFrom::kTimings:
      return "timings.prompt_n";
    case CachedTokensFrom::kNone:
      break;
  }
  return "not reported";
}

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
  c.retry_after = RetryAfterOf(r.headers, absl::Now());
  c.hung_up = r.hung_up;
  if (!r.transport.ok()) {
    c.error = r.transport;
    return c;
  }
  c.status = r.status;
  if (r.status != 200) {
    ReadErrorBody(r, &c);
  } else if (!stream ||
             absl::StartsWith(absl::StripLeadingAsciiWhitespace(r.body), "{")) {
    // A streamed request answered with one JSON object (an error, or a
    // server that does not stream) is read as a plain body.
    ReadPlainBody(r.body, stream, &c);
  } else {
    ReadStream(r.body, &c);
  }
  CachedFromTimings(&c);
  return c;
}

std::string Outcome(const Completion& c) {
  if (c.hung_up) return "hung_up";
  if (c.not_sent) return "not_sent";
  if (!c.error.ok() && c.status == 0) return "transport_error";
  if (c.status == 200) {
    return c.usable           ? "ok"
           : c.dropped_stream ? "dropped_stream"
                              : "bad_response";
  }
  if (IsRateLimited(c)) return "rate_limited";
  if (c.status >= 500) return "http_5xx";
  return "http_4xx";
}

}  // namespace kvcanary::auditor
