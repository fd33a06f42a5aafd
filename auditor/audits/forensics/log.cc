#include "auditor/audits/forensics/log.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/file.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

enum class FieldType { kTime, kId, kText, kStatus, kCount, kMs, kBool };

FieldType TypeOf(absl::string_view field) {
  if (field == "ts") return FieldType::kTime;
  if (field == "request_id") return FieldType::kId;
  if (field == "status") return FieldType::kStatus;
  if (field == "prompt_tokens" || field == "completion_tokens" ||
      field == "cached_tokens") {
    return FieldType::kCount;
  }
  if (field == "ttft_ms" || field == "total_ms") return FieldType::kMs;
  if (field == "stream") return FieldType::kBool;
  return FieldType::kText;
}

const char* TypeText(FieldType t) {
  switch (t) {
    case FieldType::kTime:
      return "a time (RFC 3339 or Unix seconds)";
    case FieldType::kId:
      return "an id (a string or an integer)";
    case FieldType::kStatus:
      return "an HTTP status";
    case FieldType::kCount:
      return "a count";
    case FieldType::kMs:
      return "a duration";
    case FieldType::kBool:
      return "a boolean";
    case FieldType::kText:
      return "a string";
  }
  return "a value";
}

bool IsCanonical(absl::string_view field) {
  for (const char* f : kLogFields) {
    if (field == f) return true;
  }
  return false;
}

// A non-negative integer from a JSON number or a string of digits.
std::optional<int64_t> AsCount(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t n = v.get<uint64_t>();
    if (n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(n);
  }
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    return n >= 0 ? std::optional<int64_t>(n) : std::nullopt;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d >= 0 && d == std::floor(d) && d < 9e15) {
      return static_cast<int64_t>(d);
    }
    return std::nullopt;
  }
  int64_t n = 0;
  if (v.is_string() && absl::SimpleAtoi(v.get<std::string>(), &n) && n >= 0) {
    return n;
  }
  return std::nullopt;
}

// `s` cut to kMaxIdBytes at a UTF-8 boundary, ending "...", if longer.
std::string Bounded(std::string s) {
  if (s.size() <= kMaxIdBytes) return s;
  size_t cut = kMaxIdBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s + "...";
}

std::optional<std::string> AsText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) return v.dump();
  return std::nullopt;
}

// Stores `v` (not null) as `field` of `r`; false if it has the wrong type.
bool Store(const std::string& field, const json& v, LogRecord* r) {
  switch (TypeOf(field)) {
    case FieldType::kTime: {
      std::optional<int64_t> us;
      if (v.is_string()) us = ParseLogTime(v.get<std::string>());
      if (v.is_number() && std::isfinite(v.get<double>())) {
        us = std::llround(v.get<double>() * 1e6);
      }
      r->ts_us = us;
      return us.has_value();
    }
    case FieldType::kId:
      if (v.is_string()) {
        r->request_id = Bounded(v.get<std::string>());
      } else if (v.is_number_integer()) {
        r->request_id = v.dump();
      } else {
        return false;
      }
      return true;
    case FieldType::kStatus: {
      auto n = AsCount(v);
      if (!n.has_value() || *n < 100 || *n > 599) return false;
      r->status = static_cast<int>(*n);
      return true;
    }
    case FieldType::kCount: {
      auto n = AsCount(v);
      if (!n.has_value()) return false;
      if (field == "prompt_tokens") r->prompt_tokens = n;
      if (field == "completion_tokens") r->completion_tokens = n;
      if (field == "cached_tokens") r->cached_tokens = n;
      return true;
    }
    case FieldType::kMs: {
      if (!v.is_number()) return false;
      const double ms = v.get<double>();
      if (!std::isfinite(ms) || ms < 0) return false;
      (field == "ttft_ms" ? r->ttft_ms : r->total_ms) = ms;
      return true;
    }
    case FieldType::kBool:
      if (!v.is_boolean()) return false;
      r->stream = v.get<bool>();
      return true;
    case FieldType::kText: {
      auto s = AsText(v);
      if (!s.has_value()) return false;
      if (field == "tenant") r->tenant = Bounded(*s);
      if (field == "finish_reason") r->finish_reason = s;
      if (field == "prefill_outcome") r->prefill_outcome = s;
      if (field == "decode_outcome") r->decode_outcome = s;
      if (field == "reason") r->reason = s;
      return true;
    }
  }
  return false;
}

}  // namespace

const json* FindPath(const json& j, absl::string_view path) {
  if (!j.is_object()) return nullptr;
  const std::string whole(path);
  if (auto it = j.find(whole); it != j.end()) return &*it;
  for (size_t dot = path.find('.'); dot != absl::string_view::npos;
       dot = path.find('.', dot + 1)) {
    auto it = j.find(std::string(path.substr(0, dot)));
    if (it == j.end()) continue;
    if (const json* v = FindPath(*it, path.substr(dot + 1))) return v;
  }
  return nullptr;
}

std::optional<int64_t> ParseLogTime(absl::string_view text) {
  const std::string s(absl::StripAsciiWhitespace(text));
  absl::Time t;
  std::string err;
  for (const char* f : {absl::RFC3339_full, "%Y-%m-%d %H:%M:%E*S%Ez"}) {
    if (absl::ParseTime(f, s, &t, &err)) return absl::ToUnixMicros(t);
  }
  for (const char* f : {"%Y-%m-%dT%H:%M:%E*S", "%Y-%m-%d %H:%M:%E*S"}) {
    if (absl::ParseTime(f, s, absl::UTCTimeZone(), &t, &err)) {
      return absl::ToUnixMicros(t);
    }
  }
  return std::nullopt;
}

LogFormat LogFormat::Kvcanary() {
  LogFormat f;
  f.name_ = "kvcanary";
  for (const char* field : kLogFields) {
    f.fields_[field].paths = {field};
    f.spec_[field] = field;
  }
  return f;
}

absl::StatusOr<LogFormat::FieldSpec> LogFormat::ParseSpec(
    const std::string& field, const json& spec) {
  FieldSpec s;
  if (spec.is_string()) {
    s.paths = {spec.get<std::string>()};
    return s;
  }
  auto bad = [&field](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("field ", field, ": ", why));
  };
  if (!spec.is_object()) return bad("want a path or an object");
  for (const auto& [key, v] : spec.items()) {
    if (key == "field") {
      if (v.is_string()) {
        s.paths = {v.get<std::string>()};
      } else if (v.is_array() && !v.empty()) {
        for (const json& p : v) {
          if (!p.is_string()) return bad("\"field\" lists paths (strings)");
          s.paths.push_back(p.get<std::string>());
        }
      } else {
        return bad("\"field\" is a path or a list of paths");
      }
    } else if (key == "minus") {
      if (!v.is_string()) return bad("\"minus\" is a path");
      s.minus = v.get<std::string>();
    } else if (key == "scale") {
      if (!v.is_number() || !std::isfinite(v.get<double>()) ||
          v.get<double>() == 0) {
        return bad("\"scale\" is a non-zero number");
      }
      s.scale = v.get<double>();
    } else if (key == "map") {
      if (!v.is_object()) return bad("\"map\" is an object");
      s.map = v;
    } else if (key == "default") {
      s.fallback = v;
    } else if (key == "const") {
      if (v.is_null()) return bad("\"const\" may not be null");
      s.constant = v;
    } else if (key != "description") {
      return bad(absl::StrCat("unknown key \"", key, "\""));
    }
  }
  if (s.paths.empty() && s.constant.is_null()) {
    return bad("needs \"field\" or \"const\"");
  }
  return s;
}

absl::StatusOr<LogFormat> LogFormat::FromMapping(const json& mapping,
                                                 const std::string& name) {
  if (!mapping.is_object() || !mapping.contains("formats") ||
      !mapping["formats"].is_object()) {
    return absl::InvalidArgumentError(
        "a mapping file is {\"formats\": {NAME: {FIELD: PATH, ...}}}");
  }
  const json& formats = mapping["formats"];
  if (!formats.contains(name)) {
    std::vector<std::string> names;
    for (const auto& [n, v] : formats.items()) names.push_back(n);
    return absl::NotFoundError(absl::StrCat(
        "no log format \"", name,
        "\" in the mapping (it has: ", absl::StrJoin(names, ", "), ")"));
  }
  const json& spec = formats[name];
  if (!spec.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("log format ", name, ": want an object"));
  }
  LogFormat f;
  f.name_ = name;
  f.spec_ = spec;
  for (const auto& [key, v] : spec.items()) {
    if (key == "description") continue;
    if (key == "where") {
      if (!v.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "log format ", name, ": \"where\" is {PATH: VALUE, ...}"));
      }
      f.where_ = v;
      continue;
    }
    if (!IsCanonical(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("log format ", name, ": unknown field \"", key,
                       "\" (fields: ", absl::StrJoin(kLogFields, ", "), ")"));
    }
    if (v.is_null()) continue;  // said explicitly: the log does not have it
    auto parsed = ParseSpec(key, v);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("log format ", name, ": ", parsed.status().message()));
    }
    f.fields_[key] = *std::move(parsed);
  }
  return f;
}

absl::StatusOr<LogFormat> LogFormat::Load(const std::string& name,
                                          const std::string& mapping_path) {
  if (mapping_path.empty()) {
    if (name.empty() || name == "kvcanary") return Kvcanary();
    return absl::InvalidArgumentError(absl::StrCat(
        "--format=", name, " needs --mapping FILE (docs/forensics.md)"));
  }
  absl::StatusOr<std::string> text = ReadFile(mapping_path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("cannot read the mapping file ", text.status().message()));
  }
  const json mapping = json::parse(*text, nullptr, false);
  if (mapping.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mapping file ", mapping_path, ": not JSON"));
  }
  std::string chosen = name;
  if (name.empty() || name == "kvcanary") {
    const json* formats = FindPath(mapping, "formats");
    std::vector<std::string> names;
    if (formats != nullptr && formats->is_object()) {
      for (const auto& [n, v] : formats->items()) names.push_back(n);
    }
    if (names.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(mapping_path, " has ", names.size(), " log formats (",
                       absl::StrJoin(names, ", "), "): pass --format NAME"));
    }
    if (names.size() == 1) chosen = names[0];
  }
  auto f = FromMapping(mapping, chosen);
  if (!f.ok()) {
    return absl::Status(f.status().code(),
                        absl::StrCat(mapping_path, ": ", f.status().message()));
  }
  return f;
}

bool LogFormat::Maps(absl::string_view field) const {
  return fields_.count(std::string(field)) > 0;
}

json LogFormat::Extract(const FieldSpec& spec, const json& line) const {
  if (!spec.constant.is_null()) return spec.constant;
  const json* found = nullptr;
  for (const std::string& p : spec.paths) {
    found = FindPath(line, p);
    if (found != nullptr && !found->is_null()) break;
    found = nullptr;
  }
  if (found == nullptr) return nullptr;
  json v = *found;
  if (spec.map.is_object()) {
    const std::string key = v.is_string() ? v.get<std::string>() : v.dump();
    if (auto it = spec.map.find(key); it != spec.map.end()) {
      v = *it;
    } else if (!spec.fallback.is_null()) {
      v = spec.fallback;
    }
  }
  if (!spec.minus.empty()) {
    const json* m = FindPath(line, spec.minus);
    if (m == nullptr || m->is_null()) return nullptr;
    if (!v.is_number() || !m->is_number()) {
      return json(json::value_t::discarded);
    }
    v = v.get<double>() - m->get<double>();
  }
  if (spec.scale != 1 && v.is_number()) v = v.get<double>() * spec.scale;
  return v;
}

bool LogFormat::Matches(const json& line) const {
  for (const auto& [path, want] : where_.items()) {
    const json* v = FindPath(line, path);
    if (v == nullptr || *v != want) return false;
  }
  return true;
}

ParsedLine LogFormat::Parse(absl::string_view line, int64_t line_no) const {
  ParsedLine p;
  p.record.line = line_no;
  if (absl::StripAsciiWhitespace(line).empty()) {
    p.kind = LineKind::kBlank;
    return p;
  }
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    p.problem = absl::StrCat("line ", line_no, ": not a JSON object");
    return p;
  }
  if (!Matches(j)) {
    p.kind = LineKind::kOtherEvent;
    return p;
  }
  for (const auto& [field, spec] : fields_) {
    const json v = Extract(spec, j);
    if (v.is_null()) continue;
    if (v.is_discarded() || !Store(field, v, &p.record)) {
      p.problem = absl::StrCat("line ", line_no, ": ", field, " is not ",
                               TypeText(TypeOf(field)));
      return p;
    }
  }
  p.kind = LineKind::kRecord;
  return p;
}

}  // namespace kvcanary::auditor
