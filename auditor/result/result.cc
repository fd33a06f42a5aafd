// CampaignResult as the campaign-result document (schema version 2,
// docs/campaign-result.schema.json, docs/reports.md).
#include "auditor/result/result.h"

#include <algorithm>
#include <cmath>

#include "common/clock.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {
json OrNull(int v) { return v > 0 ? json(v) : json(nullptr); }

json TraceNodesJson(const std::vector<TraceNodeStats>& trace_nodes) {
  json nodes = json::array();
  for (const TraceNodeStats& n : trace_nodes) {
    nodes.push_back({{"url", n.url},
                     {"events", n.events},
                     {"dropped", n.dropped},
                     {"reads_checked", n.reads_checked},
                     {"reads_unchecked", n.reads_unchecked}});
  }
  return nodes;
}
}  // namespace

Timeline MakeTimeline(int64_t started_us, int64_t ended_us,
                      const std::vector<int64_t>& probe_us,
                      const std::vector<int64_t>& error_us,
                      const std::vector<Finding>& findings) {
  Timeline tl;
  const double span_s =
      std::max(1.0, static_cast<double>(ended_us - started_us) / 1e6);
  tl.bucket_s = std::max(1.0, std::ceil(span_s / 120));
  const size_t buckets =
      std::max<size_t>(1, static_cast<size_t>(std::ceil(span_s / tl.bucket_s)));
  tl.probes.assign(buckets, 0);
  tl.errors.assign(buckets, 0);
  tl.findings.assign(buckets, 0);
  auto add = [&](std::vector<int64_t>* v, int64_t us) {
    const double at = static_cast<double>(us - started_us) / 1e6;
    const size_t b = static_cast<size_t>(std::max(0.0, at / tl.bucket_s));
    (*v)[std::min(b, buckets - 1)]++;
  };
  for (int64_t us : probe_us) add(&tl.probes, us);
  for (int64_t us : error_us) add(&tl.errors, us);
  for (const Finding& f : findings) add(&tl.findings, f.ts_us);
  return tl;
}

json CampaignResult::ErrorJson() const {
  if (error.empty()) return nullptr;
  return {{"message", error}, {"phase", audit_started ? "audit" : "start"}};
}

json CampaignResult::SpendJson() const {
  json tenants_spent = json::object();
  for (const auto& [tenant, s] : spend) tenants_spent[tenant] = s.ToJson();
  return {{"tokens", spent_tokens},
          {"budget_tokens", budget_tokens > 0 ? json(budget_tokens) : json()},
          {"budget_reached", budget_reached},
          {"rate_cuts", rate_cuts},
          {"tenants", std::move(tenants_spent)}};
}

json CampaignResult::ToJson() const {
  json j = {{"schema", "kvcanary-campaign-result"},
            {"schema_version", 3},
            {"command", command},
            {"campaign", campaign_id},
            {"target", target},
            {"api", api.empty() ? json() : json(api)},
            {"started_at", Rfc3339Utc(started_us)},
            {"verdict", VerdictName(verdict)},
            {"exit_code", exit_code()},
            {"reasons", reasons},
            {"error", ErrorJson()}};
  if (verdict == Verdict::kError && detectors.empty()) {
    j["ended_at"] = Rfc3339Utc(ended_us);
    j["elapsed_s"] = absl::ToDoubleSeconds(elapsed);
    j["tenants"] = tenants;
    if (!db_path.empty()) j["evidence"] = {{"db", db_path}};
    // What it spent before it stopped (a budget spent in calibration).
    if (!spend.empty()) j["spend"] = SpendJson();
    return j;
  }
  j["model"] = model;
  j["ended_at"] = Rfc3339Utc(ended_us);
  j["elapsed_s"] = absl::ToDoubleSeconds(elapsed);
  j["tenants"] = tenants;
  j["limit"] = {{"prompt_tokens", OrNull(limit.prompt_tokens)},
                {"refuse_above", OrNull(limit.refuse_above)},
                {"context_tokens", OrNull(limit.context_tokens)},
                {"source", limit.source.empty() ? "unknown" : limit.source},
                {"where", limit.where}};
  j["plants"] = {{"form", plants.form},
                 {"markers_per_plant", plants.markers_per_plant},
                 {"prompt_tokens", plants.prompt_tokens},
                 {"fill", plants.fill},
                 {"sent", plants.sent},
                 {"accepted_whole", plants.accepted_whole}};
  j["probes"] = {{"sent", probes},
                 {"usable", usable},
                 {"by_kind", by_kind},
                 {"by_outcome", by_outcome}};
  j["spend"] = SpendJson();
  j["positive_controls"] = positive_controls;
  json ds = json::array();
  for (const DetectorCoverage& d : detectors) ds.push_back(d.ToJson());
  j["detectors"] = ds;
  json is = json::array();
  for (const Incident& i : incidents) is.push_back(i.ToJson());
  j["incidents"] = is;
  std::map<std::string, int64_t> by_kind_findings;
  for (const Finding& f : findings) ++by_kind_findings[f.kind];
  j["findings"] = {{"total", findings.size()}, {"by_kind", by_kind_findings}};
  j["timeline"] = {{"bucket_s", timeline.bucket_s},
                   {"probes", timeline.probes},
                   {"errors", timeline.errors},
                   {"findings", timeline.findings}};
  j["trace_nodes"] = TraceNodesJson(trace_nodes);
  j["evidence"] = {
      {"db", db_path}, {"first_seq", first_seq}, {"last_seq", last_seq}};
  if (!checks.empty()) {
    json cs = json::array();
    for (const Check& c : checks) {
      cs.push_back({{"check", c.check},
                    {"subject", c.subject},
                    {"state", c.state},
                    {"message", c.message}});
    }
    j["checks"] = cs;
  }
  if (command == "probe" && details.contains("kv_events")) {
    j["kv_events"] = details["kv_events"];  // the kv_events detector's pairs
  } else if (command != "probe" && !details.empty()) {
    std::string key = command;
    for (char& c : key) c = c == '-' ? '_' : c;
    j[key] = details;
  }
  return j;
}

}  // namespace kvcanary::auditor
