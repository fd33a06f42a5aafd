#include "auditor/detectors/golden.h"

#include <algorithm>
#include <functional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "auditor/detectors/rates.h"
#include "auditor/detectors/registry.h"
#include "common/sha256.h"

namespace kvcanary::auditor {

std::optional<Finding> CompareGolden(int variant, absl::string_view expected,
                                     absl::string_view got,
                                     const std::string& tenant) {
  if (expected == got) return std::nullopt;
  Finding f;
  f.detector = "golden";
  f.kind = "golden_mismatch";
  f.severity = Severity::kMedium;
  f.detail = {{"tenant", tenant},
              {"variant", variant},
              {"expected_sha256", Sha256Hex(expected)},
              {"got_sha256", Sha256Hex(got)}};
  f.reader = tenant;
  f.group = {{"variant", variant}};
  return f;
}

std::optional<Finding> JudgeGoldenRates(int baseline_diverged, int baseline_n,
                                        int cross_diverged, int cross_n) {
  const RateRise rise =
      JudgeRateRise(baseline_diverged, baseline_n, cross_diverged, cross_n);
  if (!rise.rises) return std::nullopt;
  const double se = rise.standard_error;
  Finding f;
  f.detector = "golden";
  f.kind = "golden_divergence_rate";
  f.severity = Severity::kHigh;
  f.detail = {{"baseline_diverged", baseline_diverged},
              {"baseline_probes", baseline_n},
              {"cross_tenant_diverged", cross_diverged},
              {"cross_tenant_probes", cross_n},
              {"standard_error", se}};
  return f;
}

namespace {

class GoldenDetector : public DetectorOf<GoldenDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "golden";
    s.summary =
        "a greedy answer under load that differs from the one given alone";
    s.unit = "golden answers compared";
    s.order = 20;
    s.probes = {{ProbeKind::kGolden, 1.0}};
    return s;
  }

  void Prepare(const CampaignView& view) override {
    Detector::Prepare(view);
    variants_.assign(view.tenants.size(), {});
  }

  void Judge(const Probe& p, const Completion& c,
             const std::vector<Finding>& earlier, FindingSink& out) override {
    if (p.kind != ProbeKind::kGolden || !c.usable) return;
    const Calibration& cal = *view().calibration;
    compared_.Add(p.tenant);
    variants_[p.tenant].insert(p.golden_variant);
    auto g = CompareGolden(p.golden_variant, cal.golden.at(p.golden_variant),
                           c.text, tenant_name(p.tenant));
    // An answer the target also gave alone, after a template shift.
    if (auto also = cal.golden_also.find(p.golden_variant);
        g.has_value() && also != cal.golden_also.end() &&
        std::find(also->second.begin(), also->second.end(), c.text) !=
            also->second.end()) {
      g.reset();
    }
    // A foreign marker the output scan found in the same answer.
    const bool foreign = std::any_of(
        earlier.begin(), earlier.end(),
        [](const Finding& f) { return f.detector == "output_scan"; });
    if (cal.golden_by_rate.count(p.golden_variant)) {
      // Judged by rate at the end; only a divergence holding a foreign
      // marker is a finding by itself.
      (p.baseline ? base_n_ : cross_n_)++;
      if (g.has_value()) (p.baseline ? base_div_ : cross_div_)++;
      if (!foreign) g.reset();
    }
    if (g.has_value()) {
      // A divergence holding a foreign marker is the leak itself.
      if (foreign) g->severity = Severity::kCritical;
      out.Add(*std::move(g));
    }
  }

  absl::Status Finish(CampaignIo&, FindingSink& out) override {
    if (!prepared() || view().calibration->golden_by_rate.empty()) {
      return absl::OkStatus();
    }
    auto g = JudgeGoldenRates(base_div_, base_n_, cross_div_, cross_n_);
    if (g.has_value()) out.Add(*std::move(g));
    return absl::OkStatus();
  }

  // The calibrated answer against itself (no finding) and with a word more
  // (a finding); the rate test on a clear rise and on noise.
  std::vector<ControlCase> Controls() const override {
    if (!prepared() || view().calibration->golden.empty()) return {};
    const auto& [variant, answer] = *view().calibration->golden.begin();
    const std::string tenant = view().tenants[0];
    // Each case calls the judgement when the control runs it.
    auto one = [](std::function<std::optional<Finding>()> judge) {
      return [judge](FindingSink& out) {
        if (std::optional<Finding> f = judge(); f.has_value()) out.Add(*f);
      };
    };
    auto found = [](const std::vector<Finding>& got) { return !got.empty(); };
    auto none = [](const std::vector<Finding>& got) { return got.empty(); };
    const int v = variant;
    const std::string a = answer;
    return {
        {"a changed answer",
         one([=] { return CompareGolden(v, a, a + " and a dragon", tenant); }),
         found},
        {"the same answer", one([=] { return CompareGolden(v, a, a, tenant); }),
         none},
        {"divergence rising under cross-tenant load",
         one([] { return JudgeGoldenRates(2, 40, 20, 40); }), found},
        {"divergence as high alone",
         one([] { return JudgeGoldenRates(4, 40, 5, 40); }), none},
    };
  }

  DetectorCoverage Coverage(int) const override;

 private:
  void RateModeCoverage(DetectorCoverage* d) const;

  TenantCounts compared_;
  std::vector<std::set<int>> variants_;  // per tenant
  int base_n_ = 0, base_div_ = 0, cross_n_ = 0, cross_div_ = 0;
};
KVCANARY_REGISTER_DETECTOR(GoldenDetector);

// What rate mode can see here: the smallest rise its answers could show,
// disabled where that is blind and no variant is judged exactly.
void GoldenDetector::RateModeCoverage(DetectorCoverage* d) const {
  const Calibration& cal = *view().calibration;
  const size_t moved = cal.golden_moved_under_load.size();
  d->notes.push_back(absl::StrCat(
      "rate mode: ", cal.golden_by_rate.size(), " of ", cal.golden.size(),
      " variants' answers differ alone or under same-tenant load (",
      cal.golden_by_rate.size() - moved, " alone, ", moved,
      " only under load or with figures that moved there); judged by "
      "divergence under cross-tenant vs same-tenant load"));
  if (base_n_ < kMinRateProbes || cross_n_ < kMinRateProbes) {
    d->AddFailure(absl::StrCat("rate mode needs ", kMinRateProbes,
                               " golden answers a side, got ", base_n_,
                               " same-tenant and ", cross_n_, " cross-tenant"));
    return;
  }
  const std::string blind = BlindRateReason(
      base_div_, base_n_, cross_n_, "golden answers differed from alone");
  if (blind.empty()) {
    d->notes.push_back(absl::StrFormat(
        "sees a rise of %.0f points or more in golden answers that differ",
        *SmallestDetectableRise(base_div_, base_n_, cross_n_) * 100));
  } else if (cal.golden_by_rate.size() == cal.golden.size()) {
    d->disabled = absl::StrCat("blind on this target: ", blind);
  } else {
    d->notes.push_back(
        absl::StrCat("the rate-mode variants are blind on this target (", blind,
                     "); the others are judged exactly"));
  }
}

DetectorCoverage GoldenDetector::Coverage(int) const {
  DetectorCoverage d;
  if (!prepared()) return d;
  const Calibration& cal = *view().calibration;
  const std::vector<std::string>& tenants = view().tenants;
  d.coverage = compared_.Named(tenants);
  if (!cal.golden_failure.empty()) d.AddFailure(cal.golden_failure);
  // Every variant, for every tenant.
  for (size_t t = 0; t < tenants.size() && !cal.golden.empty(); ++t) {
    const size_t seen = variants_[t].size();
    if (seen < cal.golden.size()) {
      d.AddFailure(absl::StrCat(tenants[t], " exercised ", seen, " of ",
                                cal.golden.size(), " golden variants"));
    }
  }
  if (!cal.golden_by_rate.empty()) {
    RateModeCoverage(&d);
  }
  d.stats = {{"variants", cal.golden.size()},
             {"exact_variants", cal.golden.size() - cal.golden_by_rate.size()},
             {"rate_variants", cal.golden_by_rate.size()},
             {"moved_under_load", cal.golden_moved_under_load.size()},
             {"baseline_probes", base_n_},
             {"baseline_diverged", base_div_},
             {"cross_tenant_probes", cross_n_},
             {"cross_tenant_diverged", cross_div_}};
  return d;
}

}  // namespace
}  // namespace kvcanary::auditor
