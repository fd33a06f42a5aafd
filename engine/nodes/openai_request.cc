// Parsing and validation of the OpenAI API's requests: each field's type
// and range, the prompt or chat messages, stop strings, cache_salt,
// log-probabilities, choices, and the features accepted only at their no-op
// values; an error names its field as its "param".
#include "engine/nodes/openai_request.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_strict.h"
#include "common/status_macros.h"
#include "common/tenants_file.h"
#include "engine/model/logprobs.h"
#include "engine/nodes/openai_errors.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;

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

// Renders the messages by `chat_template`.
absl::Status ParseMessages(const json& body, ChatTemplate chat_template,
                           std::string* prompt) {
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
    if (chat_template == ChatTemplate::kPlain) {
      contents.push_back(content->get<std::string>());
    } else {
      contents.push_back(absl::StrCat("<|", r, "|>\n",
                                      content->get_ref<const std::string&>(),
                                      "\n<|end|>"));
    }
  }
  if (chat_template == ChatTemplate::kKvcanary) {
    *prompt = absl::StrCat(kKvcanaryChatHeader, absl::StrJoin(contents, "\n"),
                           "\n<|assistant|>\n");
    return absl::OkStatus();
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

absl::StatusOr<ChatTemplate> ParseChatTemplate(absl::string_view name) {
  for (ChatTemplate t : {ChatTemplate::kPlain, ChatTemplate::kKvcanary}) {
    if (name == ChatTemplateName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--chat-template=", name, ": want plain or kvcanary"));
}

const char* ChatTemplateName(ChatTemplate t) {
  return t == ChatTemplate::kKvcanary ? "kvcanary" : "plain";
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(
    absl::string_view body, bool chat, ChatTemplate chat_template) {
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
  RETURN_IF_ERROR(chat ? ParseMessages(doc, chat_template, &req.prompt)
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

}  // namespace kvcanary::engine
