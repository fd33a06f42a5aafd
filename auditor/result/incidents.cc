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
  for (const char* k : {"node", "template", "variant"}) {
    if (!key.contains(k)) continue;
    parts.push_back(key[k].is_string() ? key[k].get<std::string>()
                                       : absl::StrCat(k, " ", key[k].dump()));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

}  // namespace

std::string Incident::Summary() const {
  std::string what = kind;
  if (what.rfind("trace_", 0) == 0) what = what.substr(6);
  what = absl::StrReplaceAll(what, {{"_", " "}});
  std::string who = reader.empty() ? "" : reader;
  if (!writer.empty()) who = absl::StrCat(writer, " -> ", OrDash(reader));
  std::string s =
      absl::StrCat(who.empty() ? "" : who + ": ", rows, " x ", what);
  const std::string where = Where(key);
  if (where != "-") absl::StrAppend(&s, " (", where, ")");
  if (!requests.empty() || !pages.empty()) {
    absl::StrAppend(&s, ", ", requests.size(), " requests, ", pages.size(),
                    " pages");
  }
  return s;
}

json Incident::ToJson() const {
  return {{"id", id},
          {"detector", detector},
          {"kind", kind},
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
  std::map<std::string, Incident> by_key;  // canonical key JSON -> incident
  for (const Finding& f : findings) {
    json key = f.group;
    key["detector"] = f.detector;
    key["kind"] = f.kind;
    key["reader"] = f.reader;
    // Joined writers may differ per row: they are gathered, not keyed.
    const bool writer_in_key = !f.writer.empty() && !f.writer_joined;
    if (writer_in_key) key["writer"] = f.writer;
    const std::string k = key.dump();
    auto [it, fresh] = by_key.try_emplace(k);
    Incident& i = it->second;
    if (fresh) {
      i.id = "i-" + Sha256Hex(campaign + "\n" + k).substr(0, 8);
      i.detector = f.detector;
      i.kind = f.kind;
      i.reader = f.reader;
      i.key = f.group;
      i.first_seen_us = i.last_seen_us = f.ts_us;
    }
    if (writer_in_key) {
      i.writer = f.writer;
    } else if (!f.writer.empty()) {
      std::set<std::string> ws;
      for (absl::string_view w :
           absl::StrSplit(i.writer, ',', absl::SkipEmpty())) {
        ws.insert(std::string(w));
      }
      for (absl::string_view w :
           absl::StrSplit(f.writer, ',', absl::SkipEmpty())) {
        ws.insert(std::string(w));
      }
      i.writer = absl::StrJoin(ws, ",");
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
    if (!i.reader.empty()) i.tenants.insert(i.reader);
    for (absl::string_view w :
         absl::StrSplit(i.writer, ',', absl::SkipEmpty())) {
      i.tenants.insert(std::string(w));
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
