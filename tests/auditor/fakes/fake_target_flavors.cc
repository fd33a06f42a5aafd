#include "tests/auditor/fakes/fake_target_flavors.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor::testing::fake_target_internal {
namespace {

constexpr char kDone[] = "data: [DONE]\n\n";
// llama.cpp's n_ctx_train and Ollama's model_info context_length are the
// model's training context, not the serving window (docs/targets.md).
constexpr int kTrainContextFactor = 4;

// --- Error bodies: each flavor's own (docs/targets.md "Errors") ---

// vLLM >= 0.10.1: ErrorResponse{error: ErrorInfo{message, type, param,
// code: HTTP status}} (vllm/entrypoints/serve/utils/error_response.py).
json VllmError(int code, absl::string_view type, absl::string_view message) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", nullptr},
            {"code", code}}}};
}

// SGLang (released through 0.5.x): a flat ErrorResponse with object "error"
// (entrypoints/openai/protocol.py); streamed errors wrap it in {"error": }.
json SglangError(int code, absl::string_view message) {
  return {{"object", "error"},
          {"message", message},
          {"type", "BadRequestError"},
          {"param", nullptr},
          {"code", code}};
}

// llama.cpp: format_error_response() {code, message, type}, sent as
// {"error": ...} (tools/server/server-common.cpp).
json LlamaError(int code, absl::string_view type, absl::string_view message) {
  return {{"code", code}, {"message", message}, {"type", type}};
}

// Ollama's OpenAI layer: openai.NewError (openai/openai.go).
json OllamaError(int code, absl::string_view message) {
  const char* type = code == 400   ? "invalid_request_error"
                     : code == 404 ? "not_found_error"
                                   : "api_error";
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", nullptr},
            {"code", nullptr}}}};
}

// TGI: ErrorResponse{error: String, error_type: String} (router/src/lib.rs).
json TgiError(absl::string_view message, absl::string_view type) {
  return {{"error", message}, {"error_type", type}};
}

}  // namespace

// A refused request in the flavor's shape: 400 (TGI: 422). `llama_error`
// replaces llama.cpp's default invalid_request_error object.
Reply Refusal(Flavor f, absl::string_view message, json llama_error) {
  switch (f) {
    case Flavor::kVllm:
      return {400, VllmError(400, "BadRequestError", message).dump()};
    case Flavor::kSglang:
      return {400, SglangError(400, message).dump()};
    case Flavor::kLlamaCpp:
      if (llama_error.is_null()) {
        llama_error = LlamaError(400, "invalid_request_error", message);
      }
      return {400, json{{"error", std::move(llama_error)}}.dump()};
    case Flavor::kTgi:
      return {422, TgiError(message, "validation").dump()};
    case Flavor::kOllama:
      return {400, OllamaError(400, message).dump()};
  }
  return {400, ""};
}

// A missing or unknown key. vLLM and SGLang: {"error": "Unauthorized"}
// (AuthenticationMiddleware, add_api_key_middleware); llama.cpp:
// middleware_validate_api_key; TGI: a bare 401 from its axum layer. Ollama
// has no API keys of its own: this is what a proxy in front would send, in
// Ollama's error shape (not from Ollama's code).
Reply Unauthorized(Flavor f) {
  switch (f) {
    case Flavor::kVllm:
    case Flavor::kSglang:
      return {401, R"({"error":"Unauthorized"})"};
    case Flavor::kLlamaCpp:
      return {401, json{{"error", LlamaError(401, "authentication_error",
                                             "Invalid API Key")}}
                       .dump()};
    case Flavor::kTgi:
      return {401, ""};
    case Flavor::kOllama:
      return {401, OllamaError(401, "unauthorized").dump()};
  }
  return {401, ""};
}

namespace {

// The message each server gives for a prompt over its window.
std::string OverLimitMessage(const FakeTargetOptions& o, int prompt_tokens) {
  const int window = AdvertisedContext(o);
  switch (o.flavor) {
    case Flavor::kVllm:  // v1/engine/input_processor.py _validate_prompt_len
      if (prompt_tokens > window) {
        return absl::StrCat("The decoder prompt (length ", prompt_tokens,
                            ") is longer than the maximum model length of ",
                            window,
                            ". Make sure that `max_model_len` is no smaller "
                            "than the number of text tokens.");
      }
      return absl::StrCat(
          "The decoder prompt (length ", prompt_tokens,
          ") plus the number of requested output tokens (at least 1) is "
          "longer than the maximum model length of ",
          window,
          ". Make sure that `max_model_len` is no smaller than the number of "
          "text tokens (prompt + requested output tokens).");
    case Flavor::kSglang:  // TokenizerManager._validate_one_request
      return absl::StrCat(
          "The input (", prompt_tokens,
          " tokens) is longer than the model's context length (", window,
          " tokens).");
    case Flavor::kLlamaCpp:  // server-context.cpp, 2025 builds
      return "the request exceeds the available context size. try "
             "increasing the context size or enable context shift";
    case Flavor::kTgi:  // ValidationError::InputLength, as InferError
      return absl::StrCat(
          "Input validation error: `inputs` must have less than ", window,
          " tokens. Given: ", prompt_tokens);
    case Flavor::kOllama:  // runner errorInputTooLong (truncate=false)
      return "the input length exceeds the context length";
  }
  return "";
}

}  // namespace

// The refusal of an over-long prompt as a plain HTTP error; llama.cpp's
// carries exceed_context_size_error and the counts (PR #15780).
Reply OverLimitReply(const FakeTargetOptions& o, int prompt_tokens) {
  const std::string message = OverLimitMessage(o, prompt_tokens);
  json llama = LlamaError(400, "exceed_context_size_error", message);
  llama["n_prompt_tokens"] = prompt_tokens;
  llama["n_ctx"] = AdvertisedContext(o);
  return Refusal(o.flavor, message, std::move(llama));
}

// The refusal inside an HTTP 200 stream: each flavor's events, then [DONE].
std::vector<std::string> OverLimitStream(const FakeTargetOptions& o,
                                         int prompt_tokens, bool chat) {
  const std::string message = OverLimitMessage(o, prompt_tokens);
  std::vector<std::string> events;
  if (o.stream_errors_dropped) return {kDone};
  switch (o.flavor) {
    case Flavor::kVllm:  // completion_stream_generator: except -> data: error
      events.push_back(absl::StrCat(
          "data: ", VllmError(400, "BadRequestError", message).dump(), "\n\n"));
      break;
    case Flavor::kSglang:  // create_streaming_error_response
      events.push_back(absl::StrCat(
          "data: ", json{{"error", SglangError(400, message)}}.dump(), "\n\n"));
      break;
    case Flavor::kLlamaCpp:  // server_sent_event(sink, "error", ...) < b6500
      events.push_back(absl::StrCat(
          "error: ", LlamaError(400, "invalid_request_error", message).dump(),
          "\n\n"));
      break;
    case Flavor::kTgi:
      // /v1/completions yields Event::from(InferError); /v1/chat/completions
      // keeps only Ok results, so the error never reaches the client.
      if (!chat) {
        events.push_back(absl::StrCat(
            "data: ", TgiError(message, "validation").dump(), "\n\n"));
      }
      break;
    case Flavor::kOllama:  // not verified in Ollama's code (docs/targets.md)
      events.push_back(
          absl::StrCat("data: ", OllamaError(400, message).dump(), "\n\n"));
      break;
  }
  events.push_back(kDone);
  return events;
}

// --- Answers ---

namespace {

json Usage(const FakeTargetOptions& o, const Answer& a) {
  const int completion = static_cast<int>(a.pieces.size());
  json u = {{"prompt_tokens", a.prompt_tokens},
            {"completion_tokens", completion},
            {"total_tokens", a.prompt_tokens + completion}};
  const bool details =
      (o.flavor == Flavor::kVllm && o.report_cached_tokens) ||
      (o.flavor == Flavor::kSglang && o.report_cached_tokens &&
       a.cached_tokens > 0) ||
      (o.flavor == Flavor::kLlamaCpp && o.llama_prompt_tokens_details);
  if (details)
    u["prompt_tokens_details"] = {{"cached_tokens", a.cached_tokens}};
  return u;
}

// llama.cpp's `timings` (server_slot_stats): prompt_n excludes cache_n.
json Timings(const Answer& a, double ttft_ms) {
  return {{"cache_n", a.cached_tokens},
          {"prompt_n", a.prompt_tokens - a.cached_tokens},
          {"prompt_ms", ttft_ms},
          {"predicted_n", static_cast<int>(a.pieces.size())}};
}

json Header(const FakeTargetOptions& o, bool chat, const std::string& id,
            int64_t created, bool chunk) {
  json h = {
      {"id", id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                      : "text_completion"},
      {"created", created},
      {"model", o.model}};
  if (o.flavor == Flavor::kOllama) h["system_fingerprint"] = "fp_ollama";
  if (o.flavor == Flavor::kTgi) h["system_fingerprint"] = "3.3.0-fake-native";
  return h;
}

json Choice(bool chat, bool chunk, bool first, const std::string& text,
            const json& finish_reason) {
  json c = {{"index", 0}};
  if (!chat) {
    c["text"] = text;
  } else if (!chunk) {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  } else if (first) {
    c["delta"] = {{"role", "assistant"}, {"content", text}};
  } else {
    c["delta"] = {{"content", text}};
  }
  c["logprobs"] = nullptr;
  c["finish_reason"] = finish_reason;
  return c;
}

std::string Sse(const json& j) {
  return absl::StrCat("data: ", j.dump(), "\n\n");
}

}  // namespace

// docs/targets.md "Usage": where each flavor puts usage in a stream.
std::vector<std::string> StreamEvents(const FakeTargetOptions& o, bool chat,
                                      const std::string& id, int64_t created,
                                      const Answer& a, bool include_usage,
                                      double ttft_ms) {
  const Flavor f = o.flavor;
  std::vector<json> chunks;
  if (!chat && o.completions_route == CompletionsRoute::kLlamaNative) {
    std::vector<std::string> events;
    for (const std::string& piece : a.pieces) {
      events.push_back(Sse({{"content", piece}, {"stop", false}}));
    }
    events.push_back(Sse({{"content", ""},
                          {"stop", true},
                          {"id_slot", 0},
                          {"tokens_evaluated", a.prompt_tokens},
                          {"tokens_predicted", a.pieces.size()},
                          {"timings", Timings(a, ttft_ms)}}));
    return events;
  }
  if (!chat && o.completions_route == CompletionsRoute::kUnknownShape) {
    return {Sse({{"output", {{"text", a.text}}}}), kDone};
  }
  for (size_t i = 0; i < a.pieces.size(); ++i) {
    const bool last = i + 1 == a.pieces.size();
    json c = Header(o, chat, id, created, /*chunk=*/true);
    c["choices"] =
        json::array({Choice(chat, true, i == 0, a.pieces[i],
                            last ? json(a.finish_reason) : json(nullptr))});
    // Ollama's CompleteWriter sets an empty usage on every chunk when
    // include_usage is on; the real one follows in its own chunk.
    if (f == Flavor::kOllama && !chat && include_usage) {
      c["usage"] = {
          {"prompt_tokens", 0}, {"completion_tokens", 0}, {"total_tokens", 0}};
    }
    // TGI: the final completions chunk always carries usage; the final chat
    // chunk only with stream_options.include_usage.
    if (f == Flavor::kTgi && last && (!chat || include_usage)) {
      c["usage"] = Usage(o, a);
    }
    chunks.push_back(std::move(c));
  }
  // vLLM, SGLang, llama.cpp, Ollama: a last chunk with empty choices.
  if (include_usage && f != Flavor::kTgi) {
    json c = Header(o, chat, id, created, /*chunk=*/true);
    c["choices"] = json::array();
    c["usage"] = Usage(o, a);
    chunks.push_back(std::move(c));
  }
  if (f == Flavor::kLlamaCpp) chunks.back()["timings"] = Timings(a, ttft_ms);
  std::vector<std::string> events;
  for (const json& c : chunks) events.push_back(Sse(c));
  events.push_back(kDone);
  return events;
}

json Body(const FakeTargetOptions& o, bool chat, const std::string& id,
          int64_t created, const Answer& a, double ttft_ms) {
  if (!chat && o.completions_route == CompletionsRoute::kLlamaNative) {
    return {{"content", a.text},
            {"stop", true},
            {"id_slot", 0},
            {"model", o.model},
            {"tokens_evaluated", a.prompt_tokens},
            {"tokens_predicted", a.pieces.size()},
            {"stop_type", a.finish_reason == "length" ? "limit" : "eos"},
            {"timings", Timings(a, ttft_ms)}};
  }
  if (!chat && o.completions_route == CompletionsRoute::kUnknownShape) {
    return {{"output", {{"text", a.text}}},
            {"meta", {{"tokens", a.prompt_tokens}}}};
  }
  json b = Header(o, chat, id, created, /*chunk=*/false);
  json choice = Choice(chat, false, true, a.text, json(a.finish_reason));
  if (!a.logprobs.is_null()) choice["logprobs"] = a.logprobs;
  b["choices"] = json::array({std::move(choice)});
  b["usage"] = Usage(o, a);
  if (o.flavor == Flavor::kLlamaCpp) b["timings"] = Timings(a, ttft_ms);
  return b;
}

// --- Models and info endpoints (docs/targets.md "Limits") ---

json ModelsList(const FakeTargetOptions& o, int64_t created) {
  const bool adv = o.advertise_limit;
  const int ctx = AdvertisedContext(o);
  json card = {{"id", o.model}, {"object", "model"}, {"created", created}};
  switch (o.flavor) {
    case Flavor::kVllm:  // ModelCard
      card["owned_by"] = "vllm";
      card["root"] = o.model;
      card["parent"] = nullptr;
      if (adv) card["max_model_len"] = ctx;
      card["permission"] = json::array(
          {{{"object", "model_permission"}, {"allow_sampling", true}}});
      break;
    case Flavor::kSglang:  // available_models
      card["owned_by"] = "sglang";
      card["root"] = o.model;
      if (adv) card["max_model_len"] = ctx;
      break;
    case Flavor::kLlamaCpp:  // meta = model_meta(): training context only
      card["owned_by"] = "llamacpp";
      card["meta"] = {{"vocab_type", 2},
                      {"n_vocab", 32000},
                      {"n_ctx_train", kTrainContextFactor * ctx},
                      {"n_embd", 4096},
                      {"n_params", 7000000000LL},
                      {"size", 4000000000LL}};
      break;
    case Flavor::kTgi:  // openai_get_model_info
      card["created"] = 0;
      card["owned_by"] = o.model;
      break;
    case Flavor::kOllama:  // ToListCompletion
      card["owned_by"] = "library";
      break;
  }
  return {{"object", "list"}, {"data", json::array({card})}};
}

const char* MetricName(Flavor f) {
  return f == Flavor::kVllm     ? "vllm:request_success_total"
         : f == Flavor::kSglang ? "sglang:num_requests_total"
                                : "tgi_request_count";
}

// llama.cpp serves /metrics only when started with --metrics.
Reply LlamaMetricsOff() {
  return {501, json{{"error", LlamaError(501, "not_supported_error",
                                         "This server does not support "
                                         "metrics endpoint. Start it with "
                                         "`--metrics`")}}
                   .dump()};
}

// /get_model_info (and its successor /model_info) states no context length.
json SglangModelInfo(const FakeTargetOptions& o) {
  return {{"model_path", o.model},
          {"tokenizer_path", o.model},
          {"is_generation", true},
          {"preferred_sampling_params", nullptr},
          {"weight_version", "default"}};
}

json SglangServerInfo(const FakeTargetOptions& o) {
  // dataclasses.asdict(server_args) | scheduler_info; context_length is the
  // --context-length argument, null when not given.
  json j = {{"model_path", o.model},
            {"api_key", nullptr},
            {"context_length",
             o.advertise_limit ? json(AdvertisedContext(o)) : json(nullptr)},
            {"allow_auto_truncate", o.over_limit == OverLimit::kKeepHead},
            {"enable_cache_report", o.report_cached_tokens},
            {"disable_radix_cache",
             !o.shared_prompt_cache && !o.per_key_prompt_cache}};
  if (o.advertise_limit) {
    j["max_req_input_len"] = o.limit_tokens;
    j["max_total_num_tokens"] = 64 * AdvertisedContext(o);
  }
  // HiCache: the device pool (the first tier) is the GPU tier's blocks, and
  // the host pool behind it is on.
  j["enable_hierarchical_cache"] = o.gpu_tier_blocks > 0;
  if (o.gpu_tier_blocks > 0) {
    j["max_total_num_tokens"] = o.gpu_tier_blocks * o.cache_block_tokens;
  }
  j["internal_states"] = json::array({json::object()});
  j["version"] = "0.5.0-fake";
  return j;
}

json LlamaProps(const FakeTargetOptions& o) {
  json dgs = {{"params", {{"n_predict", -1}, {"temperature", 0.8}}}};
  if (o.advertise_limit) dgs["n_ctx"] = AdvertisedContext(o);
  return {{"default_generation_settings", dgs},
          {"total_slots", 1},
          {"model_alias", o.model},
          {"model_path", absl::StrCat("/models/", o.model, ".gguf")},
          {"modalities", {{"vision", false}, {"audio", false}}},
          {"endpoint_slots", true},
          {"endpoint_props", false},
          {"endpoint_metrics", false},
          {"build_info", "b0-fake"}};
}

json TgiInfo(const FakeTargetOptions& o) {
  json j = {{"model_id", o.model},
            {"model_sha", nullptr},
            {"model_pipeline_tag", "text-generation"},
            {"max_concurrent_requests", 128},
            {"max_best_of", 2},
            {"max_stop_sequences", 4}};
  if (o.advertise_limit) {
    j["max_input_tokens"] = AdvertisedContext(o);
    j["max_total_tokens"] = AdvertisedContext(o) + 1;
  }
  j["router"] = "text-generation-router";
  j["version"] = "3.3.0-fake";
  return j;
}

json OllamaShow(const FakeTargetOptions& o) {
  // `parameters` holds the Modelfile's PARAMETER lines: the serving window
  // shows only if num_ctx was set there. model_info is the GGUF metadata.
  std::string parameters = "stop \"<|end|>\"";
  if (o.advertise_limit) {
    parameters =
        absl::StrCat("num_ctx ", AdvertisedContext(o), "\n", parameters);
  }
  return {
      {"modelfile", absl::StrCat("FROM ", o.model)},
      {"parameters", parameters},
      {"template", "{{ .Prompt }}"},
      {"details",
       {{"format", "gguf"}, {"family", "fake"}, {"parameter_size", "7B"}}},
      {"model_info",
       {{"general.architecture", "fake"},
        {"fake.context_length", kTrainContextFactor * AdvertisedContext(o)}}},
      {"capabilities", json::array({"completion"})}};
}

}  // namespace kvcanary::auditor::testing::fake_target_internal
