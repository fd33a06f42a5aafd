#include "auditor/trace/join.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvcanary::auditor {

namespace {
const char* NodeName(TraceNode node) {
  switch (node) {
    case TraceNode::kRouter:
      return "router";
    case TraceNode::kPrefill:
      return "prefill";
    case TraceNode::kDecode:
      return "decode";
  }
  return "unknown";
}
nlohmann::json Identity(const StampIdentity& id) {
  return {{"tenant", id.tenant.value()},
          {"request", id.request.value()},
          {"gen", id.generation.value()}};
}
}  // namespace

std::string EngineTenantName(uint32_t engine_tenant,
                             const std::map<uint32_t, std::string>& names) {
  if (engine_tenant == 0) return "";
  auto it = names.find(engine_tenant);
  if (it != names.end()) return it->second;
  return absl::StrCat("engine-tenant-", engine_tenant);
}

Finding FromLedger(const LedgerFinding& f,
                   const std::map<uint32_t, std::string>& tenant_name) {
  Finding out;
  out.detector = "trace";
  out.kind = absl::StrCat("trace_", LedgerFindingKindName(f.kind));
  switch (f.kind) {
    case LedgerFindingKind::kForeignTenantRead:
    case LedgerFindingKind::kLateWrite:
      out.severity = Severity::kCritical;
      break;
    case LedgerFindingKind::kStaleRequestRead:
    case LedgerFindingKind::kTransferMismatch:
    case LedgerFindingKind::kEngineViolation:
      out.severity = Severity::kHigh;
      break;
    case LedgerFindingKind::kUnwrittenRead:
      out.severity = Severity::kMedium;
      break;
  }
  out.ts_us = f.seen_unix_us;
  out.engine_request = f.reader.request.value();
  out.reader = EngineTenantName(f.reader.tenant.value(), tenant_name);
  out.writer = EngineTenantName(f.writer.tenant.value(), tenant_name);
  out.group = {{"node", NodeName(f.node)}};
  out.detail = {{"node", NodeName(f.node)},
                {"reader", Identity(f.reader)},
                {"writer", Identity(f.writer)},
                {"reader_tenant", out.reader},
                {"writer_tenant", out.writer},
                {"writer_shared", f.writer_shared},
                {"slots", f.slots},
                {"event_seq", f.event_seq}};
  if (f.kind == LedgerFindingKind::kTransferMismatch) {
    out.detail["pages_sent"] = f.pages_sent;
    out.detail["pages_expected"] = f.pages_expected;
  } else {
    out.detail["page"] = f.page.value();
  }
  if (f.kind == LedgerFindingKind::kEngineViolation) {
    out.detail["engine_kind"] = ViolationKindName(f.engine_kind);
  }
  return out;
}

DetectorCoverage TraceCoverage(const TraceTally& tally,
                               const std::vector<std::string>& tenants) {
  DetectorCoverage d;
  for (const std::string& t : tenants) d.coverage[t] = 0;
  for (const auto& [tenant, n] : tally.requests_checked) d.coverage[tenant] = n;
  for (const std::string& f : tally.failures) d.AddFailure(f);
  if (tally.reads_checked == 0) {
    d.AddFailure(
        "0 page reads checked: the trace sampled no reads (blind), whatever "
        "else it saw");
  } else if (!tally.tenants_named) {
    d.AddFailure(
        "the target reported no engine request ids, so checked reads cannot "
        "be attributed to tenants");
  }
  d.stats = {{"events", tally.events},
             {"dropped", tally.dropped},
             {"reads_checked", tally.reads_checked},
             {"reads_unchecked", tally.reads_unchecked}};
  return d;
}

TraceCollection CollectTraces(
    const std::vector<std::unique_ptr<TraceFollower>>& followers,
    const std::map<uint64_t, std::string>& probe_requests) {
  TraceCollection out;
  TraceTally& tally = out.tally;
  tally.enabled = !followers.empty();
  // The tail of the streams: the last probes' events may still be on
  // their way. Wait until no node has sent anything for 300 ms (5 s at
  // most), not a fixed grace that a loaded machine can outrun.
  {
    auto events = [&followers] {
      uint64_t n = 0;
      for (const auto& f : followers) n += f->stats().events;
      return n;
    };
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    uint64_t last = events();
    absl::Time quiet_since = absl::Now();
    while (absl::Now() < deadline &&
           absl::Now() - quiet_since < absl::Milliseconds(300)) {
      absl::SleepFor(absl::Milliseconds(50));
      const uint64_t now = events();
      if (now != last) {
        last = now;
        quiet_since = absl::Now();
      }
    }
  }
  // Engine tenant -> the tenant names its requests' probes had.
  std::map<uint32_t, std::map<std::string, int>> votes;
  for (const auto& follower : followers) {
    absl::Status s = follower->Stop(absl::ZeroDuration());
    if (!s.ok()) {
      tally.failures.push_back(absl::StrCat(
          "the trace stream of ", follower->url(), " broke: ", s.message()));
    }
    for (const auto& [request, tenant] : follower->request_tenants()) {
      auto it = probe_requests.find(request);
      if (it != probe_requests.end()) ++votes[tenant][it->second];
    }
  }
  std::map<uint32_t, std::string> names;
  for (const auto& [tenant, by_name] : votes) {
    names[tenant] = std::max_element(by_name.begin(), by_name.end(),
                                     [](const auto& a, const auto& b) {
                                       return a.second < b.second;
                                     })
                        ->first;
  }
  tally.tenants_named = !names.empty();
  for (const auto& follower : followers) {
    const LedgerStats st = follower->stats();
    out.nodes.push_back({follower->url(), st.events, st.dropped,
                         st.reads_checked, st.reads_unchecked});
    tally.events += st.events;
    tally.dropped += st.dropped;
    tally.reads_checked += st.reads_checked;
    tally.reads_unchecked += st.reads_unchecked;
    if (st.dropped > 0) {
      tally.failures.push_back(
          absl::StrCat(st.dropped, " trace events dropped by ", follower->url(),
                       ": the shadow ledger has holes"));
    }
    for (const auto& [tenant, n] : st.requests_checked_by_tenant) {
      auto it = names.find(tenant);
      if (it == names.end()) continue;
      // A request is read on more than one node: the node that checked
      // most gives a floor on the distinct requests checked.
      int& count = tally.requests_checked[it->second];
      count = std::max(count, static_cast<int>(n));
    }
    for (const LedgerFinding& lf : follower->findings()) {
      Finding f = FromLedger(lf, names);
      f.detail["trace_url"] = follower->url();
      out.findings.push_back(std::move(f));
    }
  }
  return out;
}

}  // namespace kvcanary::auditor
