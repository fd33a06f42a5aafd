// What every auditor command ends in (probe, accept, facts, cache-audit,
// forensics): its verdict and the reasons, the coverage that earned it,
// the findings and incidents, and the command's own details; and the
// campaign-result document it becomes (docs/campaign-result.schema.json,
// docs/reports.md). Plain data: reports render it, commands fill it.
#ifndef KVCANARY_AUDITOR_RESULT_RESULT_H_
#define KVCANARY_AUDITOR_RESULT_RESULT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "auditor/result/coverage.h"
#include "auditor/result/finding.h"
#include "auditor/result/incidents.h"
#include "auditor/target/limits.h"
#include "auditor/target/spend.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// What one followed engine node's trace stream carried.
struct TraceNodeStats {
  std::string url;
  uint64_t events = 0, dropped = 0, reads_checked = 0, reads_unchecked = 0;
};

struct PlantStats {
  std::string form;
  int markers_per_plant = 0;
  int prompt_tokens = 0;  // median measured alone
  double fill = 0;        // prompt_tokens / limit
  int64_t sent = 0, accepted_whole = 0;
};

// Probes, errors and findings per time bucket, for the report's chart.
struct Timeline {
  double bucket_s = 1;
  std::vector<int64_t> probes, errors, findings;
};

// One check a command states (accept: "echo" at "length 257, end").
struct Check {
  std::string check;
  std::string subject;
  std::string state;  // passed, failed, skipped or error
  std::string message;
};

struct CampaignResult {
  // probe, accept, facts, cache-audit or forensics: every command ends in
  // this result, its verdict and its reports.
  std::string command = "probe";
  std::string campaign_id;
  std::string target, model;
  // The API the requests used, "completions" or "chat" (Target::api());
  // "" when the command stopped before it knew (JSON null).
  std::string api;
  std::vector<std::string> tenants;
  int64_t started_us = 0, ended_us = 0;
  absl::Duration elapsed;
  Verdict verdict = Verdict::kError;
  std::vector<std::string> reasons;  // why not clean
  // What stopped the command before its end ("" when it ran to its end),
  // beside whatever verdict DecideVerdict gave (findings outrank it).
  std::string error;
  // Set by the command once its start checks passed (flags and options,
  // the evidence store, the target: its model and every tenant's key, its
  // trace and KV-event streams), just before its first probe. An error
  // while it is false is "before the audit's first probe": exit 2
  // whatever else (DecideVerdict).
  bool audit_started = false;
  TargetLimit limit;
  PlantStats plants;
  int64_t probes = 0, usable = 0;
  std::map<std::string, int64_t> by_kind, by_outcome;
  // What the command spent per tenant (auditor/target/spend.h; NoteSpend).
  std::map<std::string, TenantSpend> spend;
  int64_t budget_tokens = 0;    // --budget-tokens; 0: none
  int64_t spent_tokens = 0;     // SpendLedger::spent()
  bool budget_reached = false;  // requests were not sent for it
  int rate_cuts = 0;            // times the campaign's rate was cut (429/503)
  std::map<std::string, bool> positive_controls;
  std::vector<DetectorCoverage> detectors;
  std::vector<Finding> findings;  // raw rows, as recorded
  std::vector<Incident> incidents;
  std::vector<TraceNodeStats> trace_nodes;
  Timeline timeline;
  std::string db_path;
  int64_t first_seq = 0, last_seq = 0;  // this campaign's evidence rows
  std::vector<Check> checks;            // commands that state them
  // The command's own results, under the command's name in the document
  // ("accept", "facts", "cache_audit", "forensics").
  nlohmann::json details = nlohmann::json::object();

  int exit_code() const { return static_cast<int>(verdict); }
  // `error` as the document has it: null, or {"message", "phase"} with
  // phase "start" (before the audit's first probe) or "audit".
  nlohmann::json ErrorJson() const;
  // The campaign-result document (docs/campaign-result.schema.json).
  nlohmann::json ToJson() const;
  // Its `spend` object.
  nlohmann::json SpendJson() const;
};

// Probes, errors and findings (by their ts_us) in buckets over
// [started_us, ended_us]: at least 1 s each, at most 120 buckets.
Timeline MakeTimeline(int64_t started_us, int64_t ended_us,
                      const std::vector<int64_t>& probe_us,
                      const std::vector<int64_t>& error_us,
                      const std::vector<Finding>& findings);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_RESULT_RESULT_H_
