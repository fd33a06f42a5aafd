// The facts table of `kvcanary-auditor facts`: what an endpoint states
// about itself, field by field, each value with the endpoint and field it
// came from — and "not revealed" where nothing states it. Values are read
// only from fields that state them (a server's own name in a header, a
// /version, /info or /props field, its metric names), never derived from
// a guess: a context window is not an input limit, a training context is
// not a window. docs/facts.md lists every rule.
#ifndef KVCANARY_AUDITOR_AUDITS_FACTS_FIELDS_H_
#define KVCANARY_AUDITOR_AUDITS_FACTS_FIELDS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "auditor/audits/facts/reads.h"
#include "auditor/target/completion.h"
#include "auditor/target/multi_client.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// The fields, in report order.
inline constexpr const char* kFactFields[] = {
    "engine",         "version",
    "context_tokens", "input_limit_tokens",
    "usage",          "stream_usage",
    "cached_tokens",  "completion_without_key",
    "disaggregated",  "kv_checksum",
    "watermark",      "prefix_cache",
    "page_tokens",    "trace_format",
    "cache_salt",     "tenant_header",
    "host_tier_pages"};
inline constexpr char kNotRevealed[] = "not revealed";

// Not thread-safe.
class FactsTable {
 public:
  // Records that `source` states `value` for `field`. The first value
  // stated is the field's (callers add the most direct sources first);
  // later sources that agree are listed as `also`, those that differ as
  // `conflicts`. REQUIRES: `field` is one of kFactFields (CHECKed).
  void Add(const std::string& field, nlohmann::json value,
           const std::string& source);

  bool Revealed(const std::string& field) const {
    return entries_.count(field) > 0;
  }
  // The value, or kNotRevealed.
  nlohmann::json Value(const std::string& field) const;
  int revealed() const { return static_cast<int>(entries_.size()); }
  // field -> {"value", "source", "also", "conflicts"} for every field;
  // {"value": "not revealed"} for those nothing states.
  nlohmann::json Sources() const;

 private:
  struct Entry {
    nlohmann::json value;
    std::string source;
    std::vector<std::string> also;
    nlohmann::json conflicts = nlohmann::json::array();
  };
  std::map<std::string, Entry> entries_;
};

// "vllm", "sglang", "llama.cpp", "tgi", "ollama" or "kvcanary" for a name
// one of those servers calls itself ("llamacpp", "text-generation-router",
// ...), case-insensitive; "" for any other name.
std::string EngineFamily(absl::string_view name);

// What one GET answer states: for a 200, the fields of that endpoint
// (docs/facts.md). A target read's sources name its reader ("GET /version
// .engine as acme"): readers may be shown different things. `model`: whose
// /v1/models entry to read ("": the first listed).
void ReadEndpointFacts(const EndpointRead& read, const std::string& model,
                       FactsTable* table);

// Engine nodes' GET /health roles: prefill and decode nodes both present
// state disaggregation.
void ReadNodeRoles(const std::vector<EndpointRead>& reads, FactsTable* table);

// The kinds of behaviour completions, in the order they are sent.
inline constexpr char kPlainCompletion[] = "plain";
inline constexpr char kStreamCompletion[] = "stream";
inline constexpr char kStreamUsageCompletion[] = "stream_include_usage";

// Whether a streamed request was answered as an SSE stream.
bool AnsweredAsStream(const ProbeResponse& r);

// A Server header naming an inference server: its engine and version
// (source "header Server"). Read after every body, as the least direct
// source.
void ReadServerHeader(const std::map<std::string, std::string>& headers,
                      FactsTable* table);

// What one behaviour completion (`kind`) states: usage in a plain answer, usage
// in a stream (without stream_options: "always"; with include_usage: only
// then), cached tokens. `request`: the request line it was sent with
// ("POST /v1/chat/completions"), named in each fact's source.
void ReadCompletionFacts(const std::string& request, const std::string& kind,
                         const ProbeResponse& r, const Completion& c,
                         FactsTable* table);

// What a completion sent without a key (`kind`) states:
// completion_without_key "served" for a usable 200, "refused" for a 401 or
// 403; nothing for any other answer.
void ReadKeylessCompletion(const std::string& request, const std::string& kind,
                           const Completion& c, FactsTable* table);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FACTS_FIELDS_H_
