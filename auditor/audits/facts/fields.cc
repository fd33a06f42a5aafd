#include "auditor/audits/facts/fields.h"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/check.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

bool IsFactField(const std::string& field) {
  for (const char* f : kFactFields) {
    if (field == f) return true;
  }
  return false;
}

// j[keys[0]][keys[1]]..., or null.
const json* At(const json& j, std::initializer_list<const char*> keys) {
  const json* at = &j;
  for (const char* k : keys) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(k);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::optional<int64_t> PositiveInt(const json* v) {
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  const int64_t n = v->get<int64_t>();
  if (n < 1) return std::nullopt;
  return n;
}

std::optional<std::string> NonEmptyString(const json* v) {
  if (v == nullptr || !v->is_string()) return std::nullopt;
  std::string s = v->get<std::string>();
  if (s.empty()) return std::nullopt;
  return s;
}

// Where a field of `read` is: "GET /info .version as (no key)", or for a
// node (read without a key only) "node http://... GET
// /internal/v1/limits .watermark". `what` replaces " .field" when set.
std::string Source(const EndpointRead& read, absl::string_view field,
                   absl::string_view what = "") {
  std::string s = read.spec.node ? absl::StrCat("node ", read.spec.base,
                                                " GET ", read.spec.path)
                                 : absl::StrCat("GET ", read.spec.path);
  if (!what.empty()) {
    absl::StrAppend(&s, " ", what);
  } else if (!field.empty()) {
    absl::StrAppend(&s, " .", field);
  }
  if (!read.spec.node) absl::StrAppend(&s, " as ", read.spec.reader);
  return s;
}

// Adds an integer field `key` of `j` as `field`, if it is a positive one.
void AddInt(const EndpointRead& read, const json& j, const char* key,
            const std::string& field, FactsTable* table) {
  if (auto n = PositiveInt(At(j, {key}))) {
    table->Add(field, *n, Source(read, key));
  }
}

void AddString(const EndpointRead& read, const json& j, const char* key,
               const std::string& field, FactsTable* table) {
  if (auto s = NonEmptyString(At(j, {key}))) {
    table->Add(field, *s, Source(read, key));
  }
}

// kvcanary's salt, gateway and tier modes: "cache_salt" (ignore, scoped,
// client), "tenant_header" (a name, or null: "off") and "host_tier_pages"
// (0: "off").
void ReadSaltFields(const EndpointRead& read, const json& j,
                    FactsTable* table) {
  AddString(read, j, "cache_salt", "cache_salt", table);
  if (const json* h = At(j, {"tenant_header"}); h != nullptr) {
    if (h->is_null())
      table->Add("tenant_header", "off", Source(read, "tenant_header"));
    AddString(read, j, "tenant_header", "tenant_header", table);
  }
  if (const json* n = At(j, {"host_tier_pages"});
      n != nullptr && n->is_number_integer() && n->get<int64_t>() >= 0) {
    table->Add("host_tier_pages",
               n->get<int64_t>() == 0 ? json("off") : json(*n),
               Source(read, "host_tier_pages"));
  }
}

// kvcanary's GET /version (docs/api.md); vLLM's holds only "version".
void ReadVersion(const EndpointRead& read, const json& j, FactsTable* table) {
  if (auto e = NonEmptyString(At(j, {"engine"}))) {
    const std::string family = EngineFamily(*e);
    if (!family.empty()) table->Add("engine", family, Source(read, "engine"));
  }
  AddString(read, j, "version", "version", table);
  AddInt(read, j, "max_model_len", "context_tokens", table);
  AddInt(read, j, "max_prompt_tokens", "input_limit_tokens", table);
  if (const json* d = At(j, {"disaggregated"}); d && d->is_boolean()) {
    table->Add("disaggregated", *d, Source(read, "disaggregated"));
  }
  AddString(read, j, "kv_checksum", "kv_checksum", table);
  AddString(read, j, "watermark", "watermark", table);
  AddString(read, j, "prefix_cache", "prefix_cache", table);
  AddString(read, j, "trace_format", "trace_format", table);
  AddInt(read, j, "page_tokens", "page_tokens", table);
  ReadSaltFields(read, j, table);
}

// The model's /v1/models entry: limits (kvcanary, vLLM, SGLang) and
// owned_by where it names the server.
void ReadModels(const EndpointRead& read, const json& j,
                const std::string& model, FactsTable* table) {
  const json* data = At(j, {"data"});
  if (data == nullptr || !data->is_array()) return;
  const json* entry = nullptr;
  for (const json& e : *data) {
    if (!e.is_object()) continue;
    if (model.empty() || e.value("id", "") == model) {
      entry = &e;
      break;
    }
  }
  if (entry == nullptr) return;
  AddInt(read, *entry, "max_model_len", "context_tokens", table);
  AddInt(read, *entry, "max_prompt_tokens", "input_limit_tokens", table);
  if (auto o = NonEmptyString(At(*entry, {"owned_by"}))) {
    const std::string family = EngineFamily(*o);
    if (!family.empty()) {
      table->Add("engine", family, Source(read, "data[].owned_by"));
    }
  }
}

// llama.cpp's GET /props: the per-slot window and the build.
void ReadProps(const EndpointRead& read, const json& j, FactsTable* table) {
  if (auto n = PositiveInt(At(j, {"default_generation_settings", "n_ctx"}))) {
    table->Add("context_tokens", *n,
               Source(read, "default_generation_settings.n_ctx"));
  }
  if (auto b = NonEmptyString(At(j, {"build_info"}))) {
    table->Add("engine", "llama.cpp", Source(read, "build_info"));
    table->Add("version", *b, Source(read, "build_info"));
  }
}

// TGI's GET /info.
void ReadTgiInfo(const EndpointRead& read, const json& j, FactsTable* table) {
  if (auto r = NonEmptyString(At(j, {"router"}))) {
    const std::string family = EngineFamily(*r);
    if (!family.empty()) table->Add("engine", family, Source(read, "router"));
  }
  AddString(read, j, "version", "version", table);
  AddInt(read, j, "max_total_tokens", "context_tokens", table);
  AddInt(read, j, "max_input_tokens", "input_limit_tokens", table);
  AddInt(read, j, "max_input_length", "input_limit_tokens", table);  // 1.x
}

// SGLang's GET /get_server_info (server_args and scheduler info).
void ReadServerInfo(const EndpointRead& read, const json& j,
                    FactsTable* table) {
  const json* radix = At(j, {"disable_radix_cache"});
  if (radix != nullptr && radix->is_boolean()) {
    // disable_radix_cache is an SGLang server argument.
    table->Add("engine", "sglang", Source(read, "disable_radix_cache"));
  }
  AddString(read, j, "version", "version", table);
  AddInt(read, j, "context_length", "context_tokens", table);
  AddInt(read, j, "max_req_input_len", "input_limit_tokens", table);
  if (auto m = NonEmptyString(At(j, {"disaggregation_mode"}))) {
    table->Add("disaggregated", *m != "null",
               Source(read, "disaggregation_mode"));
  }
  if (radix != nullptr && radix->is_boolean()) {
    table->Add("prefix_cache", radix->get<bool>() ? "off" : "on (radix cache)",
               Source(read, "disable_radix_cache"));
  }
  AddInt(read, j, "page_size", "page_tokens", table);
}

// Prometheus metric names that carry a server's own prefix.
void ReadMetrics(const EndpointRead& read, FactsTable* table) {
  static constexpr std::pair<const char*, const char*> kPrefixes[] = {
      {"vllm:", "vllm"},
      {"sglang:", "sglang"},
      {"llamacpp:", "llama.cpp"},
      {"tgi_", "tgi"},
      {"kvcanary_", "kvcanary"}};
  for (absl::string_view line : absl::StrSplit(read.body, '\n')) {
    if (!absl::ConsumePrefix(&line, "# HELP ")) {
      absl::ConsumePrefix(&line, "# TYPE ");
    }
    for (const auto& [prefix, family] : kPrefixes) {
      if (absl::StartsWith(line, prefix)) {
        table->Add(
            "engine", family,
            Source(read, "", absl::StrCat("metric names (", prefix, "*)")));
        return;
      }
    }
  }
}

// Ollama: GET /api/version, GET / ("Ollama is running"), GET /api/ps.
void ReadOllama(const EndpointRead& read, const json& j,
                const std::string& model, FactsTable* table) {
  if (read.spec.path == "/api/version") {
    if (auto v = NonEmptyString(At(j, {"version"}))) {
      table->Add("engine", "ollama", Source(read, ""));
      table->Add("version", *v, Source(read, "version"));
    }
    return;
  }
  if (read.spec.path == "/api/ps") {
    const json* models = At(j, {"models"});
    if (models == nullptr || !models->is_array()) return;
    for (const json& m : *models) {
      if (!m.is_object() || (!model.empty() && m.value("name", "") != model &&
                             m.value("model", "") != model)) {
        continue;
      }
      AddInt(read, m, "context_length", "context_tokens", table);
      return;
    }
  }
}

// An engine node's GET /internal/v1/limits (docs/nodes.md).
void ReadNodeLimits(const EndpointRead& read, const json& j,
                    FactsTable* table) {
  AddString(read, j, "version", "version", table);
  AddString(read, j, "kv_checksum", "kv_checksum", table);
  AddString(read, j, "watermark", "watermark", table);
  AddString(read, j, "prefix_cache", "prefix_cache", table);
  AddString(read, j, "trace_format", "trace_format", table);
  AddInt(read, j, "page_tokens", "page_tokens", table);
}

}  // namespace

void FactsTable::Add(const std::string& field, json value,
                     const std::string& source) {
  CHECK(IsFactField(field)) << field;
  auto [it, fresh] = entries_.try_emplace(field);
  Entry& e = it->second;
  if (fresh) {
    e.value = std::move(value);
    e.source = source;
    return;
  }
  if (source == e.source) return;
  if (value == e.value) {
    if (std::find(e.also.begin(), e.also.end(), source) == e.also.end()) {
      e.also.push_back(source);
    }
    return;
  }
  for (const json& c : e.conflicts) {
    if (c["source"] == source) return;
  }
  e.conflicts.push_back({{"value", std::move(value)}, {"source", source}});
}

json FactsTable::Value(const std::string& field) const {
  auto it = entries_.find(field);
  return it == entries_.end() ? json(kNotRevealed) : it->second.value;
}

json FactsTable::Sources() const {
  json out = json::object();
  for (const char* field : kFactFields) {
    auto it = entries_.find(field);
    if (it == entries_.end()) {
      out[field] = {{"value", kNotRevealed}};
      continue;
    }
    const Entry& e = it->second;
    out[field] = {{"value", e.value},
                  {"source", e.source},
                  {"also", e.also},
                  {"conflicts", e.conflicts}};
  }
  return out;
}

std::string EngineFamily(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "kvcanary") return "kvcanary";
  if (n == "vllm") return "vllm";
  if (n == "sglang") return "sglang";
  if (n == "llamacpp" || n == "llama.cpp" || n == "llama-server" ||
      n == "llama.cpp-server") {
    return "llama.cpp";
  }
  if (n == "tgi" || n == "text-generation-inference" ||
      n == "text-generation-router") {
    return "tgi";
  }
  if (n == "ollama") return "ollama";
  return "";
}

// "kvcanary/0.1.0" names the engine and its version; a product that is no
// inference server (uvicorn, nginx) names nothing.
void ReadServerHeader(const std::map<std::string, std::string>& headers,
                      FactsTable* table) {
  auto it = headers.find("server");
  if (it == headers.end()) return;
  for (absl::string_view product :
       absl::StrSplit(it->second, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> nv =
        absl::StrSplit(product, absl::MaxSplits('/', 1));
    const std::string family = EngineFamily(nv.first);
    if (family.empty()) continue;
    table->Add("engine", family, "header Server");
    if (!nv.second.empty()) table->Add("version", nv.second, "header Server");
    return;
  }
}

void ReadEndpointFacts(const EndpointRead& read, const std::string& model,
                       FactsTable* table) {
  if (read.status != 200) return;
  const std::string& path = read.spec.path;
  if (path == "/metrics") {
    ReadMetrics(read, table);
    return;
  }
  if (path == "/" && !read.spec.node &&
      absl::StartsWith(read.body, "Ollama is running")) {
    table->Add("engine", "ollama", Source(read, ""));
    return;
  }
  const json j = json::parse(read.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  if (read.spec.node) {
    if (path == "/internal/v1/limits") ReadNodeLimits(read, j, table);
    return;
  }
  if (path == "/version") {
    ReadVersion(read, j, table);
  } else if (path == "/v1/models") {
    ReadModels(read, j, model, table);
  } else if (path == "/props") {
    ReadProps(read, j, table);
  } else if (path == "/info") {
    ReadTgiInfo(read, j, table);
  } else if (path == "/get_server_info" || path == "/server_info") {
    ReadServerInfo(read, j, table);
  } else if (absl::StartsWith(path, "/api/")) {
    ReadOllama(read, j, model, table);
  }
}

void ReadNodeRoles(const std::vector<EndpointRead>& reads, FactsTable* table) {
  std::set<std::string> roles;
  for (const EndpointRead& r : reads) {
    if (!r.spec.node || r.spec.path != "/health" || r.status != 200) continue;
    const json j = json::parse(r.body, nullptr, false);
    if (auto role = NonEmptyString(At(j, {"role"}))) roles.insert(*role);
  }
  if (roles.count("prefill") && roles.count("decode")) {
    table->Add("disaggregated", true,
               "nodes GET /health .role (prefill and decode nodes)");
  }
}

bool AnsweredAsStream(const ProbeResponse& r) {
  auto ct = r.headers.find("content-type");
  if (ct != r.headers.end() &&
      absl::StrContains(absl::AsciiStrToLower(ct->second),
                        "text/event-stream")) {
    return true;
  }
  const absl::string_view body = absl::StripLeadingAsciiWhitespace(r.body);
  return absl::StartsWith(body, "data:") || absl::StartsWith(body, "event:");
}

void ReadCompletionFacts(const std::string& request, const std::string& kind,
                         const ProbeResponse& r, const Completion& c,
                         FactsTable* table) {
  if (!r.transport.ok() || !c.usable) return;
  const std::string source = absl::StrCat(request, " (", kind, ")");
  if (kind == kPlainCompletion && c.prompt_tokens >= 0) {
    table->Add("usage", "reported", source + " .usage.prompt_tokens");
  }
  if (c.cached_tokens >= 0) {
    table->Add("cached_tokens", "reported",
               source + " .usage.prompt_tokens_details.cached_tokens");
  }
  if (kind == kPlainCompletion || !AnsweredAsStream(r) || c.prompt_tokens < 0) {
    return;
  }
  table->Add("stream_usage",
             kind == kStreamCompletion ? "always"
                                       : "with stream_options.include_usage",
             source + " usage in the stream");
}

void ReadKeylessCompletion(const std::string& request, const std::string& kind,
                           const Completion& c, FactsTable* table) {
  const std::string source =
      absl::StrCat(request, " (", kind, ", no key) HTTP ", c.status);
  if (c.status == 200 && c.usable) {
    table->Add("completion_without_key", "served", source);
  } else if (c.status == 401 || c.status == 403) {
    table->Add("completion_without_key", "refused", source);
  }
}

}  // namespace kvcanary::auditor
