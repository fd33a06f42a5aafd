#include "engine/nodes/openai_api.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/json_strict.h"
#include "common/status_macros.h"
#include "common/tenants_file.h"
#include "engine/model/logprobs.h"
#include "engine/nodes/version.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;
// Output keeps insertion order, so bodies read like OpenAI's.
using ordered_json = nlohmann::ordered_json;

// Serialises without throwing: generated text may hold invalid UTF-8 (a
// token boundary inside a code point); it becomes U+FFFD.
template <typename Json>
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// kInvalidArgument carrying `param` for ErrorBody().
absl::Status FieldError(absl::string_view param, absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kOpenAiParamUrl, absl::Cord(param));
  return status;
}

absl::Status TypeError(absl::string_view param, absl::string_view expected,
                       const json& got) {
  return FieldError(
      param, absl::StrCat("Invalid type for '", param, "': expected ", expected,
                          ", but got ", got.type_name(), "."));
}

// The field `name` of `body`, or nullptr if absent or null (clients send
// null for "not given").
const json* Field(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// Reads integer field `name` into *out if present. REQUIRES: min <= max.
absl::Status GetInt(const json& body, const char* name, int64_t min,
                    int64_t max, int64_t* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) return TypeError(name, "an integer", *v);
  // Non-negative JSON integers parse as unsigned; max <= INT64_MAX makes the
  // cast safe once u <= max.
  const bool is_unsigned = v->is_number_unsigned();
  const uint64_t u = is_unsigned ? v->get<uint64_t>() : 0;
  const int64_t value = is_unsigned
                            ? static_cast<int64_t>(std::min<uint64_t>(u, max))
                            : v->get<int64_t>();
  if ((is_unsigned && u > static_cast<uint64_t>(max)) || value < min ||
      value > max) {
    return FieldError(name, absl::StrCat("'", name, "' must be in [", min, ", ",
                                         max, "], got ", v->dump(), "."));
  }
  *out = value;
  return absl::OkStatus();
}

// Reads number field `name` into *out if present; `in_range` is described
// by `range` in the error.
template <typename InRange>
absl::Status GetFloat(const json& body, const char* name, InRange in_range,
                      absl::string_view range, float* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return TypeError(name, "a number", *v);
  const double value = v->get<double>();
  if (!in_range(value)) {
    return FieldError(name, absl::StrCat("'", name, "' must be in ", range,
                                         ", got ", v->dump(), "."));
  }
  *out = static_cast<float>(value);
  return absl::OkStatus();
}

absl::Status GetBool(const json& body, const char* name, bool* out) {
  const json* v = Field(body, name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return TypeError(name, "a boolean", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, std::string* prompt) {
  const json* v = Field(body, "prompt");
  if (v == nullptr) {
    return FieldError("prompt", "Missing required parameter: 'prompt'.");
  }
  if (v->is_string()) {
    *prompt = v->get<std::string>();
    return absl::OkStatus();
  }
  if (!v->is_array()) return TypeError("prompt", "a string", *v);
  if (v->size() == 1 && (*v)[0].is_string()) {
    *prompt = (*v)[0].get<std::string>();
    return absl::OkStatus();
  }
  const bool tokens = !v->empty() && !(*v)[0].is_string();
  return FieldError("prompt",
                    tokens ? "Token-array prompts are not supported; send a "
                             "string."
                           : "'prompt' must be a string or an array of "
                             "exactly one string (batched prompts are not "
                             "supported).");
}

// Renders the messages as their contents joined by "\n".
absl::Status ParseMessages(const json& body, std::string* prompt) {
  const json* v = Field(body, "messages");
  if (v == nullptr) {
    return FieldError("messages", "Missing required parameter: 'messages'.");
  }
  if (!v->is_array()) return TypeError("messages", "an array", *v);
  if (v->empty()) {
    return FieldError("messages", "'messages' must not be empty.");
  }
  std::vector<std::string> contents;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& message = (*v)[i];
    const std::string path = absl::StrCat("messages[", i, "]");
    if (!message.is_object()) return TypeError(path, "an object", message);
    const json* role = Field(message, "role");
    const std::string role_path = path + ".role";
    if (role == nullptr) {
      return FieldError(role_path, absl::StrCat("Missing required parameter: '",
                                                role_path, "'."));
    }
    if (!role->is_string()) return TypeError(role_path, "a string", *role);
    const std::string& r = role->get_ref<const std::string&>();
    if (r != "system" && r != "user" && r != "assistant") {
      return FieldError(role_path,
                        absl::StrCat("Invalid value for '", role_path,
                                     "': expected 'system', 'user' or "
                                     "'assistant', got ",
                                     role->dump(), "."));
    }
    const json* content = Field(message, "content");
    const std::string content_path = path + ".content";
    if (content == nullptr) {
      return FieldError(
          content_path,
          absl::StrCat("Missing required parameter: '", content_path, "'."));
    }
    if (!content->is_string()) {
      return TypeError(content_path, "a string", *content);
    }
    contents.push_back(content->get<std::string>());
  }
  *prompt = absl::StrJoin(contents, "\n");
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, std::vector<std::string>* stops) {
  const json* v = Field(body, "stop");
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) {
      return FieldError("stop", "'stop' must not be an empty string.");
    }
    stops->push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) {
    return TypeError("stop", "a string or an array of strings", *v);
  }
  if (v->size() > static_cast<size_t>(kMaxStopStrings)) {
    return FieldError("stop", absl::StrCat("'stop' may hold at most ",
                                           kMaxStopStrings, " strings."));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& s = (*v)[i];
    const std::string path = absl::StrCat("stop[", i, "]");
    if (!s.is_string()) return TypeError(path, "a string", s);
    if (s.get_ref<const std::string&>().empty()) {
      return FieldError(path, absl::StrCat("'", path, "' must not be empty."));
    }
    stops->push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

// Features we do not implement are accepted only at their no-op values.
absl::Status CheckNoOps(const json& body) {
  int64_t best_of = 1;
  RETURN_IF_ERROR(GetInt(body, "best_of", INT64_MIN, INT64_MAX, &best_of));
  if (best_of != 1)
    return FieldError("best_of", "Only best_of = 1 is supported.");
  return absl::OkStatus();
}

// Completions: `logprobs` (an integer) and `echo`. Chat: `logprobs` (a
// boolean) and `top_logprobs`; `echo` is not chat's.
absl::Status ParseLogprobs(const json& body, bool chat,
                           CompletionRequest* req) {
  if (!chat) {
    // `false` is taken as absent: some clients send it for "none".
    const json* flag = Field(body, "logprobs");
    if (flag != nullptr && flag->is_boolean() && !flag->get<bool>()) {
      return GetBool(body, "echo", &req->echo);
    }
    int64_t k = -1;
    RETURN_IF_ERROR(GetInt(body, "logprobs", 0, kMaxTopLogprobs, &k));
    req->logprobs = static_cast<int>(k);
    return GetBool(body, "echo", &req->echo);
  }
  bool echo = false;
  RETURN_IF_ERROR(GetBool(body, "echo", &echo));
  if (echo) return FieldError("echo", "'echo' is not supported in chat.");
  bool wanted = false;
  RETURN_IF_ERROR(GetBool(body, "logprobs", &wanted));
  int64_t k = -1;
  RETURN_IF_ERROR(GetInt(body, "top_logprobs", 0, kMaxTopLogprobs, &k));
  if (k >= 0 && !wanted) {
    return FieldError("top_logprobs",
                      "'top_logprobs' requires 'logprobs' to be true.");
  }
  if (wanted) req->logprobs = static_cast<int>(std::max<int64_t>(k, 0));
  return absl::OkStatus();
}

// The prompt counted once, every choice's completion.
ordered_json Usage(const std::vector<CompletionResult>& choices) {
  const CompletionResult& first = choices.front();
  int64_t completion = 0;
  for (const CompletionResult& c : choices) completion += c.completion_tokens;
  return {{"prompt_tokens", first.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", first.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", first.cached_tokens}}}};
}

ordered_json FinishReason(const CompletionResult& r) {
  return r.finish_reason.empty() ? ordered_json(nullptr)
                                 : ordered_json(r.finish_reason);
}

// choices[i].logprobs: null unless asked for.
ordered_json LogprobsJson(const CompletionResult& r,
                          const std::vector<LogprobEntry>& entries,
                          size_t text_offset, bool chat) {
  if (!r.has_logprobs) return nullptr;
  return chat ? ChatLogprobsJson(entries)
              : CompletionLogprobsJson(entries, text_offset);
}

ordered_json Envelope(const CompletionResult& r, absl::string_view object) {
  return {{"id", r.id},
          {"object", std::string(object)},
          {"created", r.created},
          {"model", r.model}};
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 404:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    default:
      return "server_error";
  }
}

}  // namespace

namespace {

// "cache_salt", if present. vLLM: "Parameter 'cache_salt' must be a
// non-empty string if provided."; ours is bounded too (it travels to every
// node).
absl::Status ParseCacheSalt(const json& doc, std::string* out) {
  const json* salt = Field(doc, "cache_salt");
  if (salt == nullptr) return absl::OkStatus();
  if (!salt->is_string() ||
      !IsValidCacheSalt(salt->get_ref<const std::string&>())) {
    return FieldError(
        "cache_salt",
        absl::StrCat("'cache_salt' must be a non-empty string of at most ",
                     kMaxCacheSaltBytes, " bytes without control characters."));
  }
  *out = salt->get<std::string>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         bool chat) {
  // A syntax error, a number past double's range (1e400), bytes after the
  // value or a duplicate key: the body is not JSON we can take.
  ASSIGN_OR_RETURN(const json doc, ParseJsonStrict({body.data(), body.size()}));
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(
        "The request body must be a JSON object.");
  }

  CompletionRequest req;
  req.chat = chat;
  if (const json* model = Field(doc, "model")) {
    if (!model->is_string()) return TypeError("model", "a string", *model);
    req.model = model->get<std::string>();
  }
  RETURN_IF_ERROR(chat ? ParseMessages(doc, &req.prompt)
                       : ParsePrompt(doc, &req.prompt));

  int64_t max_tokens = req.max_tokens;
  RETURN_IF_ERROR(GetInt(doc, "max_tokens", 1, kMaxMaxTokens, &max_tokens));
  if (chat) {
    // The newer name for the same limit; if both are sent they must agree.
    int64_t max_completion = max_tokens;
    RETURN_IF_ERROR(GetInt(doc, "max_completion_tokens", 1, kMaxMaxTokens,
                           &max_completion));
    if (Field(doc, "max_tokens") != nullptr && max_completion != max_tokens) {
      return FieldError("max_completion_tokens",
                        "'max_tokens' and 'max_completion_tokens' disagree.");
    }
    max_tokens = max_completion;
  }
  req.max_tokens = static_cast<int>(max_tokens);

  RETURN_IF_ERROR(GetFloat(
      doc, "temperature", [](double t) { return t >= 0 && t <= 2; }, "[0, 2]",
      &req.temperature));
  RETURN_IF_ERROR(GetFloat(
      doc, "top_p", [](double p) { return p > 0 && p <= 1; }, "(0, 1]",
      &req.top_p));
  if (const json* seed = Field(doc, "seed")) {
    if (!seed->is_number_integer()) {
      return TypeError("seed", "an integer", *seed);
    }
    if (!seed->is_number_unsigned()) {
      return FieldError("seed", "'seed' must be a non-negative integer.");
    }
    req.seed = seed->get<uint64_t>();
  }
  RETURN_IF_ERROR(ParseStop(doc, &req.stop));
  RETURN_IF_ERROR(ParseCacheSalt(doc, &req.cache_salt));
  RETURN_IF_ERROR(GetBool(doc, "stream", &req.stream));
  if (const json* options = Field(doc, "stream_options")) {
    if (!options->is_object()) {
      return TypeError("stream_options", "an object", *options);
    }
    if (const json* include = Field(*options, "include_usage")) {
      if (!include->is_boolean()) {
        return TypeError("stream_options.include_usage", "a boolean", *include);
      }
      req.include_usage = include->get<bool>();
    }
  }
  RETURN_IF_ERROR(ParseLogprobs(doc, chat, &req));
  int64_t n = 1;
  RETURN_IF_ERROR(GetInt(doc, "n", 1, kMaxChoices, &n));
  req.n = static_cast<int>(n);
  RETURN_IF_ERROR(CheckNoOps(doc));
  return req;
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kDataLoss:
      return 502;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string ErrorBody(const absl::Status& status, absl::string_view param) {
  CHECK(!status.ok()) << "ErrorBody of an OK status";
  std::string message(status.message());
  if (message.empty()) message = absl::StatusCodeToString(status.code());
  ordered_json param_json = nullptr;
  if (!param.empty()) {
    param_json = std::string(param);
  } else if (auto p = status.GetPayload(kOpenAiParamUrl)) {
    param_json = std::string(*p);
  }
  ordered_json code_json = nullptr;
  if (auto c = status.GetPayload(kOpenAiCodeUrl)) code_json = std::string(*c);
  const ordered_json body = {
      {"error",
       {{"message", message},
        {"type", ErrorType(HttpStatusFor(status.code()))},
        {"param", param_json},
        {"code", code_json}}}};
  return Dump(body);
}

std::string ErrorReason(const absl::Status& status) {
  CHECK(!status.ok()) << "ErrorReason of an OK status";
  if (auto c = status.GetPayload(kOpenAiCodeUrl)) return std::string(*c);
  return ErrorType(HttpStatusFor(status.code()));
}

absl::Status ModelNotFound(absl::string_view model) {
  absl::Status status = absl::NotFoundError(
      absl::StrCat("The model `", model, "` does not exist."));
  status.SetPayload(kOpenAiCodeUrl, absl::Cord("model_not_found"));
  return status;
}

absl::Status ContextLengthExceeded(int prompt_tokens, int max_tokens,
                                   int prompt_limit, int context_tokens) {
  const int64_t requested = static_cast<int64_t>(prompt_tokens) + max_tokens;
  absl::Status status = absl::InvalidArgumentError(
      prompt_tokens > prompt_limit
          ? absl::StrCat("This model's maximum prompt length is ", prompt_limit,
                         " tokens, however your prompt has ", prompt_tokens,
                         " tokens. Please reduce your prompt.")
          : absl::StrCat("This model's maximum context length is ",
                         context_tokens, " tokens, however you requested ",
                         requested, " tokens (", prompt_tokens,
                         " in your prompt; ", max_tokens,
                         " for the completion). Please reduce your prompt; "
                         "or completion length."));
  status.SetPayload(kOpenAiCodeUrl, absl::Cord("context_length_exceeded"));
  return status;
}

absl::Status PromptBytesExceedLimit(size_t prompt_bytes, int64_t min_tokens,
                                    int prompt_limit) {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(
      "This model's maximum prompt length is ", prompt_limit,
      " tokens, however your prompt of ", prompt_bytes, " bytes has at least ",
      min_tokens, " tokens. Please reduce your prompt."));
  status.SetPayload(kOpenAiCodeUrl, absl::Cord("context_length_exceeded"));
  return status;
}

std::string CompletionResponseJson(const std::vector<CompletionResult>& choices,
                                   bool chat) {
  CHECK(!choices.empty());
  ordered_json body =
      Envelope(choices.front(), chat ? "chat.completion" : "text_completion");
  body["choices"] = ordered_json::array();
  for (const CompletionResult& r : choices) {
    ordered_json choice = {{"index", r.index}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", r.text}};
    } else {
      choice["text"] = r.text;
    }
    choice["logprobs"] = LogprobsJson(r, r.logprobs, 0, chat);
    choice["finish_reason"] = FinishReason(r);
    body["choices"].push_back(std::move(choice));
  }
  body["usage"] = Usage(choices);
  return Dump(body);
}

std::string StreamUsageSse(const std::vector<CompletionResult>& choices,
                           bool chat) {
  CHECK(!choices.empty());
  ordered_json body = Envelope(
      choices.front(), chat ? "chat.completion.chunk" : "text_completion");
  body["choices"] = ordered_json::array();
  body["usage"] = Usage(choices);
  return absl::StrCat("data: ", Dump(body), "\n\n");
}

std::string StreamChunkSse(const CompletionResult& partial,
                           absl::string_view delta, bool chat, bool final_chunk,
                           const std::vector<LogprobEntry>& logprobs,
                           bool usage) {
  ordered_json body =
      Envelope(partial, chat ? "chat.completion.chunk" : "text_completion");
  ordered_json choice = {{"index", partial.index}};
  if (chat) {
    ordered_json d = ordered_json::object();
    if (partial.text.empty()) d["role"] = "assistant";
    if (!delta.empty() || !final_chunk) d["content"] = std::string(delta);
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = std::string(delta);
  }
  choice["logprobs"] =
      LogprobsJson(partial, logprobs, partial.text.size(), chat);
  choice["finish_reason"] =
      final_chunk ? FinishReason(partial) : ordered_json(nullptr);
  body["choices"] = ordered_json::array({std::move(choice)});
  if (final_chunk && usage) body["usage"] = Usage({partial});
  return absl::StrCat("data: ", Dump(body), "\n\n");
}

std::string StreamDoneSse() { return "data: [DONE]\n\n"; }

std::string ModelsJson(absl::string_view model_id, int64_t created,
                       int max_model_len, int max_prompt_tokens) {
  const ordered_json body = {
      {"object", "list"},
      {"data",
       ordered_json::array({{{"id", std::string(model_id)},
                             {"object", "model"},
                             {"created", created},
                             {"owned_by", "kvcanary"},
                             {"max_model_len", max_model_len},
                             {"max_prompt_tokens", max_prompt_tokens}}})}};
  return Dump(body);
}

std::string VersionJson(const VersionInfo& info) {
  ordered_json body = {{"engine", kEngineName},
                       {"version", info.version},
                       {"disaggregated", true},
                       {"kv_checksum", info.kv_checksum},
                       {"watermark", info.watermark},
                       {"prefix_cache", info.prefix_cache},
                       {"trace_format", info.trace_format},
                       {"max_model_len", info.max_model_len},
                       {"max_prompt_tokens", info.max_prompt_tokens},
                       {"page_tokens", info.page_tokens},
                       {"host_tier_pages", info.host_tier_pages}};
  body["tenant_header"] = info.tenant_header.empty()
                              ? ordered_json(nullptr)
                              : ordered_json(info.tenant_header);
  if (!info.free_list.empty()) body["free_list"] = info.free_list;
  if (!info.cache_salt.empty()) body["cache_salt"] = info.cache_salt;
  return Dump(body);
}

StopMatcher::StopMatcher(std::vector<std::string> stops)
    : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) CHECK(!stop.empty());
}

StopMatcher::Emit StopMatcher::Feed(absl::string_view text) {
  if (stopped_) return {"", true};
  pending_.append(text.data(), text.size());
  // The match that ends first; of those ending at the same byte, the one
  // starting first. Emitted text never holds the start of a match, so
  // searching pending_ alone is enough.
  size_t best_start = std::string::npos, best_end = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t start = pending_.find(stop);
    if (start == std::string::npos) continue;
    const size_t end = start + stop.size();
    if (end < best_end || (end == best_end && start < best_start)) {
      best_start = start;
      best_end = end;
    }
  }
  if (best_start != std::string::npos) {
    stopped_ = true;
    Emit emit{pending_.substr(0, best_start), true};
    pending_.clear();
    return emit;
  }
  // Hold back the longest suffix that is a proper prefix of a stop.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  Emit emit{pending_.substr(0, pending_.size() - hold), false};
  pending_.erase(0, pending_.size() - hold);
  return emit;
}

std::string StopMatcher::Flush() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace kvcanary::engine
