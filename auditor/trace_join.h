// What the trace followers found, joined to the auditor's own tenants. The
// trace names engine tenant and request ids; the probes know tenant names
// and, where the target reports it, the engine request id of each answer.
// An engine tenant id takes the name of the tenant whose probes carried its
// requests, so trace findings and coverage name tenants.
#ifndef KVCANARY_AUDITOR_TRACE_JOIN_H_
#define KVCANARY_AUDITOR_TRACE_JOIN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "auditor/campaign_coverage.h"
#include "auditor/findings.h"
#include "auditor/trace_follower.h"

namespace kvcanary::auditor {

struct TraceNodeStats {
  std::string url;
  uint64_t events = 0, dropped = 0, reads_checked = 0, reads_unchecked = 0;
};

struct TraceCollection {
  TraceTally tally;
  std::vector<TraceNodeStats> nodes;
  std::vector<Finding> findings;  // named, with trace_url in the detail
};

// Waits for the streams to go quiet (300 ms without an event, 5 s at most),
// stops every follower (each stream's problem becomes a tally failure, as
// do dropped events) and joins what their ledgers found to tenant names.
// `probe_requests`: engine request id -> the tenant whose probe it was.
TraceCollection CollectTraces(
    const std::vector<std::unique_ptr<TraceFollower>>& followers,
    const std::map<uint64_t, std::string>& probe_requests);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TRACE_JOIN_H_
