// The per-flavor pieces of FakeTarget (fake_target.h): each flavor's error
// bodies, completion bodies and streams, and models and info endpoints, as
// docs/targets.md has them; fake_target_flavors.cc names the section and the
// server's code. Internal to fake_target.cc.
#ifndef KVCANARY_TESTS_AUDITOR_FAKE_TARGET_FLAVORS_H_
#define KVCANARY_TESTS_AUDITOR_FAKE_TARGET_FLAVORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "tests/auditor/fakes/fake_target.h"

namespace kvcanary::auditor::testing::fake_target_internal {

using json = nlohmann::ordered_json;

inline constexpr char kJson[] = "application/json";

// --- Error bodies: each flavor's own (docs/targets.md "Errors") ---

struct Reply {
  int status;
  std::string body;
  const char* content_type = kJson;
};

// A refused request in the flavor's shape: 400 (TGI: 422). `llama_error`
// replaces llama.cpp's default invalid_request_error object.
Reply Refusal(Flavor f, absl::string_view message, json llama_error = json());

// A missing or unknown key, as each flavor (or a proxy in front of Ollama)
// answers it.
Reply Unauthorized(Flavor f);

// The refusal of an over-long prompt as a plain HTTP error; llama.cpp's
// carries exceed_context_size_error and the counts (PR #15780).
Reply OverLimitReply(const FakeTargetOptions& o, int prompt_tokens);

// The refusal inside an HTTP 200 stream: each flavor's events, then [DONE].
std::vector<std::string> OverLimitStream(const FakeTargetOptions& o,
                                         int prompt_tokens, bool chat);

// --- Answers ---

struct Answer {
  int prompt_tokens = 0;
  int cached_tokens = 0;
  std::vector<std::string> pieces;  // one completion token each
  std::string text;
  std::string finish_reason;
  json logprobs;  // choices[0].logprobs of a whole answer (null: none)
};

// docs/targets.md "Usage": where each flavor puts usage in a stream.
std::vector<std::string> StreamEvents(const FakeTargetOptions& o, bool chat,
                                      const std::string& id, int64_t created,
                                      const Answer& a, bool include_usage,
                                      double ttft_ms);

json Body(const FakeTargetOptions& o, bool chat, const std::string& id,
          int64_t created, const Answer& a, double ttft_ms);

// --- Models and info endpoints (docs/targets.md "Limits") ---

json ModelsList(const FakeTargetOptions& o, int64_t created);
const char* MetricName(Flavor f);
// llama.cpp serves /metrics only when started with --metrics.
Reply LlamaMetricsOff();
// /get_model_info (and its successor /model_info) states no context length.
json SglangModelInfo(const FakeTargetOptions& o);
json SglangServerInfo(const FakeTargetOptions& o);
json LlamaProps(const FakeTargetOptions& o);
json TgiInfo(const FakeTargetOptions& o);
json OllamaShow(const FakeTargetOptions& o);

}  // namespace kvcanary::auditor::testing::fake_target_internal

#endif  // KVCANARY_TESTS_AUDITOR_FAKE_TARGET_FLAVORS_H_
