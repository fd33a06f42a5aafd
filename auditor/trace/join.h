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

#include "auditor/result/coverage.h"
#include "auditor/result/finding.h"
#include "auditor/result/result.h"
#include "auditor/trace/follower.h"

namespace kvcanary::auditor {

struct TraceTally {
  bool enabled = false;  // --trace given
  uint64_t events = 0, dropped = 0, reads_checked = 0, reads_unchecked = 0;
  // Tenant -> requests whose page reads were checked.
  std::map<std::string, int> requests_checked;
  bool tenants_named = false;         // the target reported engine request ids
  std::vector<std::string> failures;  // broken streams, drops
};

// A shadow-ledger finding as an auditor finding ("trace_<kind>"), with the
// node, page, reader and writer (engine tenant and request ids), named by
// `tenant_name` (engine tenant id -> the auditor's tenant name; an id it
// does not know is named "engine-tenant-<id>").
Finding FromLedger(const LedgerFinding& f,
                   const std::map<uint32_t, std::string>& tenant_name);
std::string EngineTenantName(uint32_t engine_tenant,
                             const std::map<uint32_t, std::string>& names);

struct TraceCollection {
  TraceTally tally;
  std::vector<TraceNodeStats> nodes;
  std::vector<Finding> findings;  // named, with trace_url in the detail
};

// Waits for the streams to go quiet (300 ms without an event, 5 s at most),
// stops every follower (each stream's problem becomes a tally failure, as
// do dropped events) and joins what their ledgers found to tenant names.
// `probe_requests`: engine request id -> the tenant whose probe it was.
// The trace detector's coverage from what its streams showed: requests
// whose reads were checked per tenant (every one of `tenants` named, 0 if
// none), and why it cannot vouch — a broken stream, dropped events, no
// read sampled at all (blind), reads that cannot be tied to tenants.
DetectorCoverage TraceCoverage(const TraceTally& tally,
                               const std::vector<std::string>& tenants);

TraceCollection CollectTraces(
    const std::vector<std::unique_ptr<TraceFollower>>& followers,
    const std::map<uint64_t, std::string>& probe_requests);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TRACE_JOIN_H_
