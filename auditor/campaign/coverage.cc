#include "auditor/campaign/coverage.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kvcanary::auditor {
namespace {

// Fills the parts every detector shares; `count` reads its unit per tenant.
template <typename Count>
DetectorCoverage Make(const CoverageInputs& in, const std::string& name,
                      const std::string& unit, Count count) {
  DetectorCoverage d;
  d.name = name;
  d.unit = unit;
  d.floor = FloorOf(in.floors, name);
  for (size_t t = 0; t < in.tenants.size(); ++t) {
    d.coverage[in.tenants[t]] = count(in.tallies[t]);
  }
  auto c = in.controls.find(name);
  if (c != in.controls.end() && !c->second) {
    d.AddFailure("its positive control failed: the detector cannot be trusted");
  }
  auto f = in.findings.find(name);
  d.findings = f == in.findings.end() ? 0 : f->second;
  return d;
}

DetectorCoverage OutputScan(const CoverageInputs& in) {
  const Calibration& cal = *in.calibration;
  DetectorCoverage d =
      Make(in, "output_scan", "plants accepted whole",
           [](const TenantTally& t) { return t.plants_whole; });
  if (!cal.plant_failure.empty()) d.AddFailure(cal.plant_failure);
  // Plants that landed prove nothing if the answers hold no text to scan.
  for (size_t t = 0; t < in.tenants.size(); ++t) {
    if (in.tallies[t].scanned < d.floor) {
      d.AddFailure(absl::StrCat(in.tenants[t], " got ", in.tallies[t].scanned,
                                " answers with text to scan (floor ", d.floor,
                                ")"));
    }
  }
  int64_t scanned = 0, sent = 0, whole = 0, cut = 0;
  for (const TenantTally& t : in.tallies) {
    scanned += t.scanned;
    sent += t.plants_sent;
    whole += t.plants_whole;
    cut += t.plants_cut;
  }
  d.stats = {{"answers_scanned", scanned},
             {"markers_registered", in.markers_registered},
             {"plants_sent", sent},
             {"plants_whole", whole},
             {"plants_cut", cut},
             {"plants_cut_alone", cal.sizing.cut},
             {"plant_form", cal.sizing.form},
             {"markers_per_plant", cal.sizing.markers_per_plant},
             {"plant_prompt_tokens", cal.sizing.median_tokens},
             {"fill", cal.sizing.fill}};
  return d;
}

DetectorCoverage Golden(const CoverageInputs& in) {
  const Calibration& cal = *in.calibration;
  DetectorCoverage d = Make(in, "golden", "golden answers compared",
                            [](const TenantTally& t) { return t.golden; });
  if (!cal.golden_failure.empty()) d.AddFailure(cal.golden_failure);
  // Every variant, for every tenant.
  for (size_t t = 0; t < in.tenants.size() && !cal.golden.empty(); ++t) {
    const size_t seen = in.tallies[t].golden_variants.size();
    if (seen < cal.golden.size()) {
      d.AddFailure(absl::StrCat(in.tenants[t], " exercised ", seen, " of ",
                                cal.golden.size(), " golden variants"));
    }
  }
  if (!cal.golden_by_rate.empty()) {
    d.notes.push_back(absl::StrCat(
        "rate mode: ", cal.golden_by_rate.size(), " of ", cal.golden.size(),
        " variants differ even alone (the target is not deterministic); "
        "judged by divergence under cross-tenant vs same-tenant load"));
    if (in.golden_baseline_n < 10 || in.golden_cross_n < 10) {
      d.AddFailure(
          absl::StrCat("rate mode needs 10 golden answers a side, got ",
                       in.golden_baseline_n, " same-tenant and ",
                       in.golden_cross_n, " cross-tenant"));
    }
  }
  d.stats = {{"variants", cal.golden.size()},
             {"exact_variants", cal.golden.size() - cal.golden_by_rate.size()},
             {"rate_variants", cal.golden_by_rate.size()},
             {"baseline_probes", in.golden_baseline_n},
             {"baseline_diverged", in.golden_baseline_diverged},
             {"cross_tenant_probes", in.golden_cross_n},
             {"cross_tenant_diverged", in.golden_cross_diverged}};
  return d;
}

DetectorCoverage Echo(const CoverageInputs& in) {
  const Calibration& cal = *in.calibration;
  DetectorCoverage d = Make(in, "echo", "echo answers checked",
                            [](const TenantTally& t) { return t.echo; });
  d.disabled = cal.echo_disabled;
  if (!cal.echo_failure.empty()) d.AddFailure(cal.echo_failure);
  int echoing = 0;
  for (size_t t = 0; t < cal.nonces.size(); ++t) {
    if (cal.nonces[t]) {
      ++echoing;
    } else if (d.disabled.empty() && cal.echo_failure.empty()) {
      d.AddFailure(
          absl::StrCat("no nonce of ", in.tenants[t], " echoed alone"));
    }
  }
  d.stats = {{"tenants_with_echoing_nonce", echoing}};
  return d;
}

DetectorCoverage Boundary(const CoverageInputs& in) {
  const Calibration& cal = *in.calibration;
  DetectorCoverage d =
      Make(in, "boundary", "answers judged at and past the limit",
           [](const TenantTally& t) { return t.boundary; });
  if (!cal.boundary_failure.empty()) d.AddFailure(cal.boundary_failure);
  d.notes.push_back(absl::StrCat("limit ", cal.limit.prompt_tokens,
                                 " prompt tokens (", cal.limit.source, ": ",
                                 cal.limit.where, ")"));
  d.stats = {{"limit_prompt_tokens", cal.limit.prompt_tokens},
             {"refuse_above_tokens", cal.limit.refuse_above},
             {"limit_source", cal.limit.source},
             {"unit_tokens", cal.unit_tokens},
             {"tolerance", cal.tolerance},
             {"at_limit_tokens",
              cal.base_tokens + cal.at_limit_units * cal.unit_tokens},
             {"past_limit_tokens",
              cal.past_limit_units == 0
                  ? 0
                  : cal.base_tokens + cal.past_limit_units * cal.unit_tokens}};
  return d;
}

DetectorCoverage Latency(const CoverageInputs& in) {
  const Calibration& cal = *in.calibration;
  DetectorCoverage d = Make(in, "latency", "cache-busted first tokens judged",
                            [](const TenantTally& t) { return t.latency; });
  if (!cal.latency.failure.empty()) d.AddFailure(cal.latency.failure);
  if (cal.latency.calibrated) {
    d.notes.push_back(absl::StrFormat(
        "prefill %.1f us/token, R² %.3f over %d lengths",
        cal.latency.per_token_ms * 1000, cal.latency.r2, cal.latency.lengths));
  }
  d.stats = {{"calibrated", cal.latency.calibrated},
             {"per_token_us", cal.latency.per_token_ms * 1000},
             {"base_ms", cal.latency.base_ms},
             {"r2", cal.latency.r2},
             {"lengths", cal.latency.lengths},
             {"samples", cal.latency_samples.size()}};
  return d;
}

DetectorCoverage Trace(const CoverageInputs& in) {
  const TraceTally& tr = in.trace;
  DetectorCoverage d =
      Make(in, "trace", "requests whose page reads were checked",
           [](const TenantTally&) { return 0; });
  if (!tr.enabled) {
    d.disabled = "no --trace";
    d.coverage.clear();
    return d;
  }
  for (const auto& [tenant, n] : tr.requests_checked) d.coverage[tenant] = n;
  for (const std::string& f : tr.failures) d.AddFailure(f);
  if (tr.reads_checked == 0) {
    d.AddFailure(
        "0 page reads checked: the trace sampled no reads (blind), whatever "
        "else it saw");
  } else if (!tr.tenants_named) {
    d.AddFailure(
        "the target reported no engine request ids, so checked reads cannot "
        "be attributed to tenants");
  }
  d.stats = {{"events", tr.events},
             {"dropped", tr.dropped},
             {"reads_checked", tr.reads_checked},
             {"reads_unchecked", tr.reads_unchecked}};
  return d;
}

}  // namespace

std::vector<DetectorCoverage> BuildCoverage(const CoverageInputs& in) {
  std::vector<DetectorCoverage> out = {OutputScan(in), Golden(in),  Echo(in),
                                       Boundary(in),   Latency(in), Trace(in)};
  for (DetectorCoverage& d : out) {
    d.required = in.required.empty() ? d.disabled.empty()
                                     : in.required.count(d.name) > 0;
    d.Judge(in.tenants);
  }
  return out;
}

std::vector<std::string> TenantProblems(const CoverageInputs& in) {
  std::vector<std::string> out;
  for (size_t t = 0; t < in.tenants.size(); ++t) {
    if (in.tallies[t].refused > 0) {
      out.push_back(absl::StrCat(
          in.tenants[t], ": ", in.tallies[t].refused,
          " probes refused (HTTP 401/403) after its key was accepted: the "
          "tenant is not covered"));
    }
  }
  return out;
}

}  // namespace kvcanary::auditor
