#include "auditor/audits/forensics/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

constexpr size_t kMaxProblemsListed = 20;

// "1 request", "3 requests".
std::string Requests(int64_t n, absl::string_view what = "request") {
  return absl::StrCat(n, " ", what, n == 1 ? "" : "s");
}

json FilesJson(const std::vector<LogFile>& files) {
  json out = json::array();
  for (const LogFile& f : files) {
    out.push_back(
        {{"path", f.path}, {"sha256", f.sha256}, {"size_bytes", f.size_bytes}});
  }
  return out;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

}  // namespace

void ForensicsReport::SetRules(const RuleSet& rules,
                               const std::string& format) {
  rules_ = rules;
  format_ = format;
}

void ForensicsReport::SetFiles(const std::vector<LogFile>& files) {
  files_ = files;
}

void ForensicsReport::CountLine(const ParsedLine& line) {
  ++lines_;
  switch (line.kind) {
    case LineKind::kRecord:
      ++records_;
      break;
    case LineKind::kBlank:
      ++blank_;
      break;
    case LineKind::kOtherEvent:
      ++other_events_;
      break;
    case LineKind::kUnreadable:
      ++unreadable_;
      if (unreadable_first_.size() < kMaxProblemsListed) {
        unreadable_first_.push_back(line.problem);
      }
      break;
  }
}

std::string ForensicsReport::AddRequest(const LogRecord& record,
                                        const Judgement& j) {
  const std::string tenant = record.tenant.value_or(kNoTenant);
  const int64_t window_us = absl::ToInt64Microseconds(options_.window);
  const int64_t start = record.ts_us.has_value()
                            ? FloorDiv(*record.ts_us, window_us) * window_us
                            : kNoWindow;
  total_.Add(j);
  by_tenant_[tenant].Add(j);
  by_window_[{tenant, start}].Add(j);
  for (int i = 0; i < kNumRules; ++i) {
    if (j.results[i] == RuleResult::kUnchecked) {
      missing_[i].insert(j.missing[i]);
    }
  }
  return start == kNoWindow ? "" : Rfc3339Utc(start);
}

void ForensicsReport::AddFlagged(const Finding& f) {
  json entry = f.detail;
  entry["kind"] = f.kind;
  entry["severity"] = SeverityName(f.severity);
  flagged_.push_back(std::move(entry));
}

std::string ForensicsReport::RuleStateName(int rule) const {
  const RuleState& s = rules_.rules[rule];
  if (!s.enabled) return s.required ? "not_checked" : "disabled";
  if (total_.unchecked[rule] == 0) return "checked";
  return total_.checked[rule] > 0 ? "partial" : "not_checked";
}

std::string ForensicsReport::Method() const {
  std::vector<std::string> parts;
  for (int i = 0; i < kNumRules; ++i) {
    if (rules_.rules[i].enabled) {
      parts.push_back(absl::StrCat(RuleKind(i), ": ", rules_.rules[i].method));
    }
  }
  return absl::StrCat(
      "counted from the log's own records, one request per line (",
      absl::StrJoin(parts, "; "),
      "). A request the log did not record, or recorded without a field a "
      "rule needs, is not counted: each number is a floor");
}

std::string ForensicsReport::Statement(const std::string& tenant,
                                       const Tally& t) const {
  if (t.flagged == 0) {
    return absl::StrCat("no request of ", tenant,
                        " matches a signature the rules checked (", t.served,
                        " served)");
  }
  std::vector<std::string> kinds;
  for (int i = 0; i < kNumRules; ++i) {
    if (t.flagged_by[i] > 0) {
      kinds.push_back(absl::StrCat(RuleKind(i), " ", t.flagged_by[i]));
    }
  }
  return absl::StrCat("at least ", Requests(t.flagged), " of ", tenant,
                      " were served with a silent-contamination signature (",
                      absl::StrJoin(kinds, ", "), ")");
}

std::string ForensicsReport::ExposedLine() const {
  if (total_.flagged == 0) {
    return absl::StrCat("no request matches a silent-contamination signature (",
                        Requests(total_.served, "served request"), " judged)");
  }
  std::vector<std::string> per;
  for (const auto& [tenant, t] : by_tenant_) {
    if (t.flagged > 0) per.push_back(absl::StrCat(tenant, " ", t.flagged));
  }
  return absl::StrCat("at least ", Requests(total_.flagged), " (",
                      absl::StrJoin(per, ", "),
                      ") were served with a silent-contamination signature; "
                      "the log shows only what it recorded");
}

DetectorCoverage ForensicsReport::Coverage(size_t findings) const {
  DetectorCoverage d;
  d.name = "log_forensics";
  d.required = true;
  d.floor = 1;
  d.unit = "served requests every running rule checked";
  d.findings = static_cast<int>(findings);
  std::vector<std::string> served_tenants;
  for (const auto& [tenant, t] : by_tenant_) {
    if (t.served == 0) continue;
    served_tenants.push_back(tenant);
    d.coverage[tenant] = static_cast<int>(t.fully_checked);
  }
  if (unreadable_ > 0) {
    d.AddFailure(absl::StrCat(unreadable_, " of ", lines_,
                              " lines could not be read (",
                              unreadable_first_.front(), ")"));
  }
  if (records_ == 0) {
    d.AddFailure("the log holds no request record");
  } else if (total_.served == 0) {
    d.AddFailure(absl::StrCat("no served request to judge (",
                              Requests(records_), ", none served)"));
  }
  for (int i = 0; i < kNumRules; ++i) {
    const RuleState& s = rules_.rules[i];
    if (!s.enabled && s.required) {
      d.AddFailure(absl::StrCat(RuleKind(i), " not checked: ", s.why_not));
    } else if (!s.enabled) {
      d.notes.push_back(absl::StrCat(RuleKind(i), " disabled: ", s.why_not));
    } else if (total_.unchecked[i] > 0) {
      d.AddFailure(absl::StrCat(RuleKind(i), ": ",
                                Requests(total_.unchecked[i]),
                                " could not be checked (missing ",
                                absl::StrJoin(missing_[i], ", "), ")"));
    }
  }
  if (total_.over_limit_refused > 0) {
    d.notes.push_back(absl::StrCat(Requests(total_.over_limit_refused),
                                   " over the input limit refused, not "
                                   "served (not exposure)"));
  }
  if (total_.too_short > 0) {
    d.notes.push_back(
        absl::StrCat(Requests(total_.too_short, "served request"),
                     " too short to judge the first token (floor under "
                     "0.3 ms)"));
  }
  d.stats = {{"lines", lines_},
             {"records", records_},
             {"unreadable_lines", unreadable_},
             {"other_events", other_events_},
             {"served", total_.served},
             {"refused", total_.refused + total_.failed_in_stream},
             {"over_limit_refused", total_.over_limit_refused},
             {"flagged", total_.flagged},
             {"input_limit", rules_.input_limit},
             {"floor_us_per_token", rules_.floor.us_per_token}};
  for (int i = 0; i < kNumRules; ++i) {
    const std::string k = RuleKind(i);
    d.stats[k + "_state"] = RuleStateName(i);
    d.stats[k + "_checked"] = total_.checked[i];
    d.stats[k + "_unchecked"] = total_.unchecked[i];
  }
  d.Judge(served_tenants);
  return d;
}

std::vector<std::string> ForensicsReport::Tenants() const {
  std::vector<std::string> out;
  for (const auto& [tenant, t] : by_tenant_) {
    if (tenant != kNoTenant || t.served > 0) out.push_back(tenant);
  }
  return out;
}

std::vector<Check> ForensicsReport::Checks() const {
  std::vector<Check> out;
  out.push_back({"log_lines", options_.log_path,
                 unreadable_ > 0 ? "error" : "passed",
                 absl::StrCat(lines_, " lines, ", records_, " requests, ",
                              unreadable_, " unreadable")});
  for (int i = 0; i < kNumRules; ++i) {
    const RuleState& s = rules_.rules[i];
    for (const auto& [tenant, t] : by_tenant_) {
      if (t.served == 0 && t.unchecked[i] == 0) continue;
      Check c{RuleKind(i), tenant, "passed", ""};
      if (!s.enabled) {
        c.state = s.required ? "error" : "skipped";
        c.message = s.why_not;
      } else if (t.flagged_by[i] > 0) {
        c.state = "failed";
        c.message = absl::StrCat("at least ", t.flagged_by[i], " of ",
                                 Requests(t.served, "served request"));
      } else if (t.unchecked[i] > 0) {
        c.state = "error";
        c.message = absl::StrCat(Requests(t.unchecked[i]),
                                 " could not be checked (missing ",
                                 absl::StrJoin(missing_[i], ", "), ")");
      } else {
        c.message = absl::StrCat(t.checked[i], " of ",
                                 Requests(t.served, "served request"),
                                 " checked, none flagged");
      }
      out.push_back(std::move(c));
    }
  }
  return out;
}

json ForensicsReport::RulesJson() const {
  json out = json::array();
  for (int i = 0; i < kNumRules; ++i) {
    const RuleState& s = rules_.rules[i];
    out.push_back({{"kind", RuleKind(i)},
                   {"state", RuleStateName(i)},
                   {"required", s.required},
                   {"method", s.method},
                   {"why_not", s.why_not},
                   {"checked", total_.checked[i]},
                   {"unchecked", total_.unchecked[i]},
                   {"missing_fields", missing_[i]},
                   {"flagged_at_least", total_.flagged_by[i]}});
  }
  return out;
}

json ForensicsReport::CountsJson() const {
  const int64_t window_us = absl::ToInt64Microseconds(options_.window);
  const std::string method = Method();
  json out = json::array();
  for (const auto& [key, t] : by_window_) {
    json c = t.ToJson();
    c["tenant"] = key.first;
    const bool timed = key.second != kNoWindow;
    c["window_start"] = timed ? json(Rfc3339Utc(key.second)) : json();
    c["window_end"] = timed ? json(Rfc3339Utc(key.second + window_us)) : json();
    c["statement"] = Statement(key.first, t);
    c["method"] = method;
    out.push_back(std::move(c));
  }
  return out;
}

std::string ForensicsReport::LogLine() const {
  std::string out = options_.log_path;
  if (!files_.empty()) {
    absl::StrAppend(&out, " (", files_.back().size_bytes, " bytes)");
  }
  if (files_.size() > 1) {
    std::vector<std::string> rotated;
    for (size_t i = 0; i + 1 < files_.size(); ++i) {
      rotated.push_back(
          absl::StrCat(files_[i].path, " (", files_[i].size_bytes, " bytes)"));
    }
    absl::StrAppend(&out, " and its rotated ", absl::StrJoin(rotated, ", "),
                    ": ", files_.size(), " files read oldest first");
  }
  return out;
}

void ForensicsReport::AddIdLines(json* details) const {
  for (int i = 0; i < kNumRules; ++i) {
    const std::string kind = RuleKind(i);
    std::vector<std::string> ids;
    int64_t n = 0;
    for (const json& f : flagged_) {
      const json& sigs = f["signatures"];
      if (std::find(sigs.begin(), sigs.end(), kind) == sigs.end()) continue;
      if (++n > static_cast<int64_t>(kIdsPrinted)) continue;
      const json& id = f["request_id"];
      ids.push_back(id.is_string()
                        ? id.get<std::string>()
                        : absl::StrCat("(line ", f["line"].dump(), ", no id)"));
    }
    if (n == 0) continue;
    std::string line = absl::StrJoin(ids, ", ");
    if (n > static_cast<int64_t>(kIdsPrinted)) {
      absl::StrAppend(&line, " and ", n - static_cast<int64_t>(kIdsPrinted),
                      " more (all in the JSON: flagged_request_ids)");
    }
    (*details)["flagged_" + kind] = line;
  }
}

json ForensicsReport::Details() const {
  json tenants = json::object();
  for (const auto& [tenant, t] : by_tenant_) {
    tenants[tenant] = t.ToJson();
    tenants[tenant]["statement"] = Statement(tenant, t);
  }
  json ids = json::array();
  for (const json& f : flagged_) ids.push_back(f["request_id"]);
  const TtftFloor& floor = rules_.floor;
  const LogFile main = files_.empty() ? LogFile{} : files_.back();
  // Plain fields are what a person reads (printed one per line); the rest
  // is in objects.
  json d = {{"log", LogLine()},
            {"format", format_},
            {"input_limit", rules_.input_limit},
            {"ttft_floor", floor.us_per_token > 0
                               ? absl::StrCat(floor.us_per_token,
                                              " us per uncached prompt token (",
                                              floor.source, ")")
                               : absl::StrCat("none: ", floor.source)},
            {"lines", absl::StrCat(lines_, ": ", records_, " requests, ",
                                   unreadable_, " unreadable, ", other_events_,
                                   " other events, ", blank_, " blank")},
            {"exposed", ExposedLine()},
            {"source",
             {{"log", options_.log_path},
              {"sha256", main.sha256},
              {"size_bytes", main.size_bytes},
              {"files", FilesJson(files_)},
              {"format", format_},
              {"mapping", options_.mapping_path},
              {"window_s", absl::ToDoubleSeconds(options_.window)}}},
            {"method", {{"counting", Method()}}},
            {"floor",
             {{"us_per_token", floor.us_per_token},
              {"from_flag", floor.from_flag},
              {"source", floor.source},
              {"calibration", floor.evidence}}},
            {"line_counts",
             {{"lines", lines_},
              {"requests", records_},
              {"unreadable", unreadable_},
              {"other_events", other_events_},
              {"blank", blank_},
              {"unreadable_first", unreadable_first_}}},
            {"rules", RulesJson()},
            {"total", total_.ToJson()},
            {"tenants", tenants},
            {"counts", CountsJson()},
            {"flagged_request_ids", ids},
            {"flagged", flagged_}};
  AddIdLines(&d);
  if (total_.over_limit_refused > 0) {
    d["refused_over_limit"] = absl::StrCat(
        Requests(total_.over_limit_refused),
        " over the input limit refused, not served (counted as refused, "
        "not exposed)");
  }
  return d;
}

json ForensicsReport::EndFields() const {
  json by_kind = json::object();
  for (int i = 0; i < kNumRules; ++i) {
    by_kind[RuleKind(i)] = total_.flagged_by[i];
  }
  const LogFile main = files_.empty() ? LogFile{} : files_.back();
  return {{"log_sha256", main.sha256},
          {"log_size_bytes", main.size_bytes},
          {"log_files", FilesJson(files_)},
          {"lines", lines_},
          {"requests", records_},
          {"unreadable_lines", unreadable_},
          {"served", total_.served},
          {"flagged_at_least", total_.flagged},
          {"flagged_by_signature", by_kind},
          {"over_limit_refused", total_.over_limit_refused}};
}

}  // namespace kvcanary::auditor
