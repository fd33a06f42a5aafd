#include "engine/nodes/node_settings.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/page_stamp.h"
#include "common/trace_event.h"
#include "engine/core/engine.h"
#include "engine/nodes/version.h"

namespace kvcanary::engine {
namespace {

// Rank of a setting by how much it protects tenants from each other: the
// smaller, the less. Unknown values rank lowest (an unknown mode is not
// vouched for).
int WatermarkRank(const std::string& mode) {
  if (mode == "enforce") return 3;
  if (mode == "detect") return 2;
  if (mode == "off") return 1;
  return 0;
}
int PrefixCacheRank(const std::string& mode) {
  if (mode == "off") return 3;
  if (mode == "tenant") return 2;
  if (mode == "global") return 1;
  return 0;
}

int CacheSaltRank(const std::string& mode) {
  if (mode == "ignore" || mode == "scoped") return 2;
  if (mode == "client") return 1;
  return 0;
}

// The least protective value of `field` over `nodes`, by `rank`.
template <typename Field, typename Rank>
std::string Weakest(const std::vector<NodeSettings>& nodes, Field field,
                    Rank rank) {
  std::string out = field(nodes.front());
  for (const NodeSettings& n : nodes) {
    if (rank(field(n)) < rank(out)) out = field(n);
  }
  return out;
}

// What every node that reports `field` says; "mixed" where they differ, ""
// where none reports it (older nodes).
std::string Agreed(const std::vector<NodeSettings>& nodes,
                   std::string NodeSettings::*field) {
  std::string out;
  for (const NodeSettings& n : nodes) {
    const std::string& v = n.*field;
    if (v.empty()) continue;
    if (out.empty()) out = v;
    if (v != out) out = "mixed";
  }
  return out;
}

}  // namespace

NodeSettings NodeSettings::Of(const EngineOptions& engine, int num_pages,
                              int max_prompt_tokens, int context_tokens) {
  NodeSettings s;
  s.max_prompt_tokens = max_prompt_tokens;
  s.context_tokens = context_tokens;
  s.page_tokens = engine.page_tokens;
  s.watermark = WatermarkModeName(engine.watermark);
  s.prefix_cache = PrefixCacheModeName(engine.prefix_cache);
  s.cache_salt = CacheSaltModeName(engine.cache_salt);
  s.host_tier_pages = engine.host_tier_pages;
  s.kv_cache_tokens = num_pages * engine.page_tokens;
  s.free_list = FreeListOrderName(engine.free_list);
  s.numerics = NumericsName(engine.numerics);
  s.kv_checksum = "crc32c";  // docs/kv-transfer.md: not switchable
  s.trace_format = absl::StrCat("kvt", static_cast<int>(kTraceVersionLatest));
  s.version = kEngineVersion;
  return s;
}

nlohmann::json NodeSettings::ToJson() const {
  nlohmann::json j;
  j["max_prompt_tokens"] = max_prompt_tokens;
  j["context_tokens"] = context_tokens;
  j["page_tokens"] = page_tokens;
  j["watermark"] = watermark;
  j["prefix_cache"] = prefix_cache;
  j["cache_salt"] = cache_salt;
  j["host_tier_pages"] = host_tier_pages;
  j["kv_cache_tokens"] = kv_cache_tokens;
  j["free_list"] = free_list;
  j["numerics"] = numerics;
  j["kv_checksum"] = kv_checksum;
  j["trace_format"] = trace_format;
  j["version"] = version;
  return j;
}

absl::StatusOr<NodeSettings> NodeSettings::FromJson(const nlohmann::json& j) {
  auto int_field = [&](const char* name) {
    return j.contains(name) && j[name].is_number_integer();
  };
  if (!j.is_object() || !int_field("max_prompt_tokens") ||
      !int_field("context_tokens")) {
    return absl::DataLossError("malformed limits");
  }
  NodeSettings s;
  s.max_prompt_tokens = j["max_prompt_tokens"].get<int>();
  s.context_tokens = j["context_tokens"].get<int>();
  if (int_field("page_tokens")) s.page_tokens = j["page_tokens"].get<int>();
  if (int_field("host_tier_pages")) {
    s.host_tier_pages = j["host_tier_pages"].get<int>();
  }
  if (int_field("kv_cache_tokens")) {
    s.kv_cache_tokens = j["kv_cache_tokens"].get<int>();
  }
  auto string_field = [&](const char* name, std::string* out) {
    if (j.contains(name) && j[name].is_string()) *out = j[name];
  };
  string_field("watermark", &s.watermark);
  string_field("prefix_cache", &s.prefix_cache);
  string_field("cache_salt", &s.cache_salt);
  string_field("free_list", &s.free_list);
  string_field("numerics", &s.numerics);
  string_field("kv_checksum", &s.kv_checksum);
  string_field("trace_format", &s.trace_format);
  string_field("version", &s.version);
  return s;
}

ServingSettings CombineNodeSettings(const std::vector<NodeSettings>& prefill,
                                    const std::vector<NodeSettings>& decode) {
  CHECK(!prefill.empty() && !decode.empty());
  std::vector<NodeSettings> all = prefill;
  all.insert(all.end(), decode.begin(), decode.end());
  ServingSettings s;
  s.max_prompt_tokens = s.decode_max_prompt_tokens = s.context_tokens =
      s.page_tokens = 1 << 30;
  for (const NodeSettings& n : all) {
    s.max_prompt_tokens = std::min(s.max_prompt_tokens, n.max_prompt_tokens);
    s.context_tokens = std::min(s.context_tokens, n.context_tokens);
    s.page_tokens = std::min(s.page_tokens, n.page_tokens);
  }
  for (const NodeSettings& n : decode) {
    s.decode_max_prompt_tokens =
        std::min(s.decode_max_prompt_tokens, n.max_prompt_tokens);
  }
  s.watermark = Weakest(
      all, [](const NodeSettings& n) { return n.watermark; }, WatermarkRank);
  s.prefix_cache = Weakest(
      prefill, [](const NodeSettings& n) { return n.prefix_cache; },
      PrefixCacheRank);
  s.cache_salt = Weakest(
      prefill, [](const NodeSettings& n) { return n.cache_salt; },
      CacheSaltRank);
  for (const NodeSettings& n : prefill) {
    s.host_tier_pages = std::max(s.host_tier_pages, n.host_tier_pages);
    s.kv_cache_tokens = std::max(s.kv_cache_tokens, n.kv_cache_tokens);
  }
  s.free_list = Agreed(all, &NodeSettings::free_list);
  s.numerics = Agreed(all, &NodeSettings::numerics);
  s.kv_checksum = Weakest(
      decode, [](const NodeSettings& n) { return n.kv_checksum; },
      [](const std::string& c) { return c == "crc32c" ? 1 : 0; });
  s.trace_format = Weakest(
      all, [](const NodeSettings& n) { return n.trace_format; },
      [](const std::string& t) { return t.empty() ? 0 : 1; });
  return s;
}

}  // namespace kvcanary::engine
