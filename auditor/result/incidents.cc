#include "auditor/result/incidents.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/text_table.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// Where an incident happened, for the table: the node, template or variant.
std::string Where(const json& key) {
  std::vector<std::string> parts;
  for (const char* k : {"node", "template", "variant", "cause"}) {
    if (!key.contains(k)) continue;
    parts.push_back(key[k].is_string() ? key[k].get<std::string>()
                                       : absl::StrCat(k, " ", key[k].dump()));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

// Adds the comma-joined names of `more` to the comma-joined `list`, sorted
// and once each.
void MergeNames(std::string* list, const std::string& more) {
  std::set<std::string> names;
  for (const std::string* l : {static_cast<const std::string*>(list), &more}) {
    for (absl::string_view n : absl::StrSplit(*l, ',', absl::SkipEmpty())) {
      names.insert(std::string(n));
    }
  }
  *list = absl::StrJoin(names, ",");
}

// Detectors whose incidents are one per cause across tenants (incidents.h).
bool AcrossTenants(const std::string& detector) {
  return detector == "golden" || detector == "logprob_golden" ||
         detector == "prompt_logprobs" || detector == "echo" ||
         detector == "latency" || detector == "boundary";
}

// Whether a boundary row's prompt was past the limit: its template says so,
// or its detail's predicted count is over the limit it was judged against.
bool PastLimit(const Finding& f) {
  const json& g = f.group;
  const std::string t = g.is_object() ? g.value("template", "") : "";
  if (t == "past_limit" || t == "ladder" || t == "accept_past_limit") {
    return true;
  }
  const json& d = f.detail;
  if (!d.is_object()) return false;
  const json limit = d.value("limit", json());
  const json predicted = d.value("predicted_prompt_tokens", json());
  return limit.is_number() && predicted.is_number() &&
         limit.get<double>() > 0 &&
         predicted.get<double>() > limit.get<double>();
}

// The cause a boundary row shows (incidents.h). `cut_probes`: the probes
// whose prompt past the limit came back cut.
std::string BoundaryCause(const Finding& f,
                          const std::set<int64_t>& cut_probes) {
  if (f.kind == "prompt_truncated") {
    return PastLimit(f) ? "cut_past_limit" : "cut_within_limit";
  }
  if (f.kind == "boundary_accepted") {
    return f.probe >= 0 && cut_probes.count(f.probe) ? "cut_past_limit"
                                                     : "accepted_past_limit";
  }
  return f.kind;
}

// The kind an incident of boundary `cause` is named by.
std::string CauseKind(const std::string& cause) {
  if (cause == "cut_past_limit" || cause == "cut_within_limit") {
    return "prompt_truncated";
  }
  if (cause == "accepted_past_limit") return "boundary_accepted";
  return cause;
}

// What a row is grouped by (incidents.h).
struct RowKey {
  std::string hashed;  // canonical JSON: detector, kind, fields, tenants
  std::string kind;    // the incident's kind
  json fields;         // the incident's `key`
  bool writer_keyed = false;
};

RowKey KeyOf(const Finding& f, const std::set<int64_t>& cut_probes) {
  RowKey k;
  k.kind = f.kind;
  k.fields = f.group.is_object() ? f.group : json::object();
  if (f.detector == "boundary") {
    const std::string cause = BoundaryCause(f, cut_probes);
    k.kind = CauseKind(cause);
    k.fields = {{"cause", cause}};
  }
  json key = k.fields;
  key["detector"] = f.detector;
  key["kind"] = k.kind;
  if (!AcrossTenants(f.detector)) {
    key["reader"] = f.reader;
    // Joined writers may differ per row: they are gathered, not keyed.
    k.writer_keyed = !f.writer.empty() && !f.writer_joined;
    if (k.writer_keyed) key["writer"] = f.writer;
  }
  k.hashed = key.dump();
  return k;
}

// The probes with a prompt_truncated row past the limit.
std::set<int64_t> CutProbes(const std::vector<Finding>& findings) {
  std::set<int64_t> out;
  for (const Finding& f : findings) {
    if (f.detector == "boundary" && f.kind == "prompt_truncated" &&
        f.probe >= 0 && PastLimit(f)) {
      out.insert(f.probe);
    }
  }
  return out;
}

}  // namespace

std::string Incident::Summary() const {
  auto words = [](std::string k) {
    if (k.rfind("trace_", 0) == 0) k = k.substr(6);
    return absl::StrReplaceAll(k, {{"_", " "}});
  };
  // "12 x prompt truncated", or per kind when the cause has several.
  std::string what = absl::StrCat(rows, " x ", words(kind));
  if (kinds.size() > 1) {
    std::vector<std::string> parts;
    for (const auto& [k, n] : kinds) {
      parts.push_back(absl::StrCat(n, " x ", words(k)));
    }
    what = absl::StrJoin(parts, " + ");
  }
  std::string who = reader.empty() ? "" : reader;
  if (!writer.empty()) who = absl::StrCat(writer, " -> ", OrDash(reader));
  std::string s = absl::StrCat(who.empty() ? "" : who + ": ", what);
  const std::string where = Where(key);
  if (where != "-") absl::StrAppend(&s, " (", where, ")");
  if (!requests.empty() || !pages.empty()) {
    absl::StrAppend(&s, ", ", requests.size(), " requests, ", pages.size(),
                    " pages");
  }
  return s;
}

json Incident::ToJson() const {
  return {
      {"id", id},
      {"detector", detector},
      {"kind", kind},
      {"kinds", kinds.empty() && rows > 0 ? json{{kind, rows}} : json(kinds)},
      {"severity", SeverityName(severity)},
      {"writer", writer.empty() ? json(nullptr) : json(writer)},
      {"reader", reader.empty() ? json(nullptr) : json(reader)},
      {"tenants", tenants},
      {"key", key},
      {"first_seen", Rfc3339Utc(first_seen_us)},
      {"last_seen", Rfc3339Utc(last_seen_us)},
      {"first_seen_us", first_seen_us},
      {"last_seen_us", last_seen_us},
      {"rows", rows},
      {"requests", requests},
      {"probes", probes},
      {"pages", pages},
      {"summary", Summary()}};
}

Incident Incident::FromJson(const json& j) {
  Incident i;
  i.id = j.value("id", "");
  i.detector = j.value("detector", "");
  i.kind = j.value("kind", "");
  if (j.contains("kinds") && j["kinds"].is_object()) {
    for (const auto& [k, n] : j["kinds"].items()) {
      if (n.is_number_integer()) i.kinds[k] = n.get<int64_t>();
    }
  }
  i.severity = SeverityFromName(j.value("severity", "low"));
  if (j.contains("writer") && j["writer"].is_string()) i.writer = j["writer"];
  if (j.contains("reader") && j["reader"].is_string()) i.reader = j["reader"];
  if (j.contains("tenants") && j["tenants"].is_array()) {
    for (const json& t : j["tenants"]) {
      if (t.is_string()) i.tenants.insert(t.get<std::string>());
    }
  }
  i.key = j.value("key", json::object());
  i.first_seen_us = j.value("first_seen_us", int64_t{0});
  i.last_seen_us = j.value("last_seen_us", int64_t{0});
  i.rows = j.value("rows", int64_t{0});
  auto fill = [&j](const char* name, auto* out) {
    if (!j.contains(name) || !j[name].is_array()) return;
    for (const json& v : j[name]) {
      if (v.is_number_integer()) out->insert(v.get<int64_t>());
    }
  };
  // Rows of older versions: one kind.
  if (i.kinds.empty() && i.rows > 0) i.kinds[i.kind] = i.rows;
  fill("requests", &i.requests);
  fill("probes", &i.probes);
  fill("pages", &i.pages);
  return i;
}

void JoinWriters(std::vector<Finding>* findings) {
  std::map<uint64_t, std::set<std::string>> writers;  // engine request ->
  for (const Finding& f : *findings) {
    if (f.detector != "trace" || f.engine_request == 0 || f.writer.empty() ||
        f.writer == f.reader) {
      continue;
    }
    writers[f.engine_request].insert(f.writer);
  }
  for (Finding& f : *findings) {
    if (!f.writer.empty() || f.engine_request == 0) continue;
    auto it = writers.find(f.engine_request);
    if (it != writers.end()) {
      f.writer = absl::StrJoin(it->second, ",");
      f.writer_joined = true;
    }
  }
}

std::vector<Incident> GroupIncidents(const std::string& campaign,
                                     const std::vector<Finding>& findings) {
  const std::set<int64_t> cut_probes = CutProbes(findings);
  std::map<std::string, Incident> by_key;  // canonical key JSON -> incident
  for (const Finding& f : findings) {
    const RowKey k = KeyOf(f, cut_probes);
    auto [it, fresh] = by_key.try_emplace(k.hashed);
    Incident& i = it->second;
    if (fresh) {
      i.id = "i-" + Sha256Hex(campaign + "\n" + k.hashed).substr(0, 8);
      i.detector = f.detector;
      i.kind = k.kind;
      i.key = k.fields;
      i.first_seen_us = i.last_seen_us = f.ts_us;
    }
    ++i.kinds[f.kind];
    MergeNames(&i.reader, f.reader);
    if (k.writer_keyed) {
      i.writer = f.writer;
    } else {
      MergeNames(&i.writer, f.writer);
    }
    if (static_cast<int>(f.severity) > static_cast<int>(i.severity)) {
      i.severity = f.severity;
    }
    i.first_seen_us = std::min(i.first_seen_us, f.ts_us);
    i.last_seen_us = std::max(i.last_seen_us, f.ts_us);
    ++i.rows;
    if (f.engine_request != 0) i.requests.insert(f.engine_request);
    if (f.probe >= 0) i.probes.insert(f.probe);
    if (f.detail.contains("page") && f.detail["page"].is_number_unsigned()) {
      i.pages.insert(f.detail["page"].get<uint64_t>());
    }
  }
  std::vector<Incident> out;
  for (auto& [k, i] : by_key) {
    for (const std::string* names : {&i.reader, &i.writer}) {
      for (absl::string_view t :
           absl::StrSplit(*names, ',', absl::SkipEmpty())) {
        i.tenants.insert(std::string(t));
      }
    }
    out.push_back(std::move(i));
  }
  std::sort(out.begin(), out.end(), [](const Incident& a, const Incident& b) {
    if (a.severity != b.severity) {
      return static_cast<int>(a.severity) > static_cast<int>(b.severity);
    }
    if (a.rows != b.rows) return a.rows > b.rows;
    return a.id < b.id;
  });
  return out;
}

std::string IncidentTable(const std::vector<Incident>& incidents,
                          int max_lines) {
  TextTable table({{"WRITER"},
                   {"READER"},
                   {"KIND"},
                   {"SEVERITY"},
                   {"ROWS"},
                   {"REQUESTS"},
                   {"PAGES"},
                   {"WHERE"},
                   {"ID"}});
  const size_t shown =
      std::min(incidents.size(), static_cast<size_t>(std::max(0, max_lines)));
  for (size_t n = 0; n < shown; ++n) {
    const Incident& i = incidents[n];
    table.AddRow({OrDash(i.writer), OrDash(i.reader), i.kind,
                  SeverityName(i.severity), absl::StrCat(i.rows),
                  absl::StrCat(i.requests.size()), absl::StrCat(i.pages.size()),
                  Where(i.key), i.id});
  }
  std::string out = table.ToString();
  if (shown < incidents.size()) {
    absl::StrAppend(&out, "... and ", incidents.size() - shown,
                    " more incidents\n");
  }
  return out;
}

}  // namespace kvcanary::auditor
