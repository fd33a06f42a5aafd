// The OpenAI API's answers: the completion response (one choice per
// result, usage counted once), the stream's server-sent events, the models
// list and the version body, in OpenAI's field order.
#include "engine/nodes/openai_responses.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/nodes/openai_internal.h"
#include "engine/nodes/openai_logprobs.h"
#include "engine/nodes/version.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

// Output keeps insertion order, so bodies read like OpenAI's.
using ordered_json = nlohmann::ordered_json;
using openai_internal::Dump;

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

}  // namespace

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
                       {"kv_cache_tokens", info.kv_cache_tokens},
                       {"host_tier_pages", info.host_tier_pages}};
  body["tenant_header"] = info.tenant_header.empty()
                              ? ordered_json(nullptr)
                              : ordered_json(info.tenant_header);
  if (!info.free_list.empty()) body["free_list"] = info.free_list;
  if (!info.cache_salt.empty()) body["cache_salt"] = info.cache_salt;
  if (!info.numerics.empty()) body["numerics"] = info.numerics;
  return Dump(body);
}

}  // namespace kvcanary::engine
