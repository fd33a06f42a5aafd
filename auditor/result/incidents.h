// Incidents: findings grouped by what a person acts on — whose data, read
// by whom, where, how often — instead of one row per request × page × kind.
// The raw rows stay in the evidence chain; an incident lists the requests,
// probes and pages it groups.
//
// Key per detector (besides detector and kind):
//   trace        node, reader tenant, writer tenant
//   output_scan  reader (the probing tenant), writer (the marker's owner)
//   golden       tenant, variant
//   echo         tenant
//   boundary     tenant, template (at_limit, past_limit, plant, ladder)
//   latency      tenant, template
// A finding with no writer of its own (a black-box finding, a failed
// transfer) on an engine request the trace saw read other tenants' pages
// takes those tenants as its writers (the join is the engine request id
// the target reported for the probe).
#ifndef KVCANARY_AUDITOR_RESULT_INCIDENTS_H_
#define KVCANARY_AUDITOR_RESULT_INCIDENTS_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "auditor/result/finding.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct Incident {
  std::string id;  // "i-" + 8 hex of SHA-256(campaign, key): stable
  std::string detector;
  std::string kind;
  Severity severity = Severity::kLow;  // the worst of its rows
  std::string reader;                  // "" unknown
  std::string writer;                  // "" unknown; several: comma-joined
  std::set<std::string> tenants;       // every tenant named
  nlohmann::json key = nlohmann::json::object();
  int64_t first_seen_us = 0, last_seen_us = 0;
  int64_t rows = 0;
  std::set<uint64_t> requests;  // engine request ids
  std::set<int64_t> probes;     // the auditor's probe numbers
  std::set<uint64_t> pages;

  // One line for people: "globex -> acme: 212 foreign tenant reads on
  // decode (37 requests, 12 pages)".
  std::string Summary() const;
  // The incident in the campaign-result schema (docs/reports.md).
  nlohmann::json ToJson() const;
  static Incident FromJson(const nlohmann::json& j);
};

// Fills the writer of findings that have none from the trace findings of
// the same engine request (see above).
void JoinWriters(std::vector<Finding>* findings);

// Groups `findings` into incidents, worst first (severity, then rows).
std::vector<Incident> GroupIncidents(const std::string& campaign,
                                     const std::vector<Finding>& findings);

// The incident table for people: at most `max_lines` lines of one incident
// each, writer first, fields never cut; "... and N more" past that.
std::string IncidentTable(const std::vector<Incident>& incidents,
                          int max_lines);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_RESULT_INCIDENTS_H_
