// What a campaign checked, turned into each detector's coverage: the units
// it counts per tenant, the floor, whether it is required, and every failed
// calibration, positive control or trace problem that makes it
// inconclusive whatever the counts. A pure function of the campaign's
// tallies, so the rules can be tested without a target.
#ifndef KVCANARY_AUDITOR_CAMPAIGN_COVERAGE_H_
#define KVCANARY_AUDITOR_CAMPAIGN_COVERAGE_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "auditor/campaign/calibration.h"
#include "auditor/result/coverage.h"
#include "auditor/trace/join.h"

namespace kvcanary::auditor {

// Per tenant, what its probes gave the detectors.
struct TenantTally {
  int plants_sent = 0;
  // 200 with prompt_tokens within plant_tolerance of the prediction.
  int plants_whole = 0;
  int plants_cut = 0;  // 200 with fewer: findings, never coverage
  // Usable answers with text, scanned for markers (a cut plant's never).
  int scanned = 0;
  int golden = 0;    // golden answers compared
  int echo = 0;      // echo answers checked
  int boundary = 0;  // answers judged at or past the limit
  int latency = 0;   // cache-busted first tokens judged
  int refused = 0;   // 401/403 during the run
  std::set<int> golden_variants;
  // Cursors of the probe loop (which plant or variant is next).
  int plant_cursor = 0, golden_cursor = 0;
};

struct CoverageInputs {
  std::vector<std::string> tenants;
  std::map<std::string, int> floors;  // "" = default
  std::set<std::string> required;     // empty: the default set
  const Calibration* calibration = nullptr;
  std::vector<TenantTally> tallies;  // per tenant, as `tenants`
  std::map<std::string, bool> controls;
  std::map<std::string, int> findings;  // detector -> finding rows
  int markers_registered = 0;
  int golden_baseline_n = 0, golden_baseline_diverged = 0;
  int golden_cross_n = 0, golden_cross_diverged = 0;
  TraceTally trace;
};

// The six detectors, judged, in report order.
std::vector<DetectorCoverage> BuildCoverage(const CoverageInputs& in);

// Problems of a tenant that no detector owns: probes refused (401/403)
// after the key was accepted at the start.
std::vector<std::string> TenantProblems(const CoverageInputs& in);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_COVERAGE_H_
