// Incidents: findings grouped by what a person acts on — one cause, and
// for a leak whose data was read by whom, where — instead of one row per
// request x page x kind x tenant. The raw rows stay in the evidence chain;
// an incident lists the tenants, requests, probes and pages it groups.
//
// Key per detector (besides the detector):
//   trace        kind, node, reader tenant, writer tenant
//   output_scan  kind, reader (the probing tenant), writer (the marker's
//                owner)
//   golden       kind, variant          across tenants: the readers are
//   echo         kind                   listed in `tenants` (and
//   latency      kind, template         comma-joined in `reader`)
//   logprob_golden, prompt_logprobs: kind, variant, across tenants
//   boundary     cause (below)
//   any other    kind, reader, writer, its grouping fields
// A behaviour of the server (it cuts over-long prompts, its golden answers
// change under load) is seen by every tenant that probes it, so those
// detectors' incidents are not split by tenant.
//
// Boundary rows are grouped by the cause they show, since one probe can
// give two kinds for one cause:
//   cut_past_limit       a prompt past the limit answered and cut:
//                        prompt_truncated of a past-limit probe (templates
//                        past_limit, ladder, accept_past_limit, or a
//                        predicted count over the row's limit), and the
//                        boundary_accepted row of the same probe
//   cut_within_limit     a prompt within the limit answered and cut:
//                        prompt_truncated of a plant, at_limit or accept
//                        probe (worse: nothing was past any limit)
//   accepted_past_limit  a prompt past the limit answered, not seen cut:
//                        boundary_accepted alone
//   otherwise            the kind itself (prompt_tokens_mismatch,
//                        boundary_not_refused)
// The incident's kind is the cause's (prompt_truncated for both cuts,
// boundary_accepted), and `kinds` counts its rows by kind.
//
// A finding with no writer of its own (a black-box finding, a failed
// transfer) on an engine request the trace saw read other tenants' pages
// takes those tenants as its writers (the join is the engine request id
// the target reported for the probe); they are gathered, never keyed.
// Ids are "i-" + 8 hex of SHA-256(campaign, key): the same rows in the same
// campaign always give the same ids.
#ifndef KVCANARY_AUDITOR_RESULT_INCIDENTS_H_
#define KVCANARY_AUDITOR_RESULT_INCIDENTS_H_

#include <cstdint>
#include <map>
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
  std::map<std::string, int64_t> kinds;  // finding kind -> rows
  Severity severity = Severity::kLow;    // the worst of its rows
  std::string reader;                    // "" unknown; several: comma-joined
  std::string writer;                    // "" unknown; several: comma-joined
  std::set<std::string> tenants;         // every tenant named
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
