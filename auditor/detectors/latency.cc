#include "auditor/detectors/latency.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "auditor/detectors/registry.h"

namespace kvcanary::auditor {

std::optional<Finding> JudgeLatency(const LatencyModel& m, int prompt_tokens,
                                    double ttft_ms, const std::string& tenant,
                                    const std::string& template_name,
                                    bool* judged) {
  if (judged != nullptr) *judged = false;
  if (!m.calibrated) return std::nullopt;
  const double prefill_ms = m.per_token_ms * prompt_tokens;
  if (prefill_ms < 1.0) return std::nullopt;  // too small to judge
  if (judged != nullptr) *judged = true;
  const double floor_ms = m.base_ms + 0.3 * prefill_ms;
  if (ttft_ms >= floor_ms) return std::nullopt;
  Finding f;
  f.detector = "latency";
  f.kind = "latency_implausible";
  f.severity = Severity::kMedium;
  f.reader = tenant;
  f.group = {{"template", template_name}};
  f.detail = {{"tenant", tenant},
              {"template", template_name},
              {"prompt_tokens", prompt_tokens},
              {"ttft_ms", ttft_ms},
              {"floor_ms", floor_ms},
              {"calibrated_base_ms", m.base_ms},
              {"calibrated_per_token_ms", m.per_token_ms}};
  return f;
}

namespace {

class LatencyDetector : public DetectorOf<LatencyDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "latency";
    s.summary =
        "a first token too fast for the prompt the target claims to have "
        "read";
    s.unit = "cache-busted first tokens judged";
    s.order = 50;
    s.probes = {{ProbeKind::kAtLimit, 1.0}};
    return s;
  }
  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink& out) override {
    const bool past = p.kind == ProbeKind::kPastLimit;
    if ((p.kind != ProbeKind::kAtLimit && !past) || !p.stream || !c.usable) {
      return;
    }
    bool judged = false;
    auto l = JudgeLatency(view().calibration->latency,
                          c.prompt_tokens > 0 ? c.prompt_tokens : p.predicted,
                          c.ttft_ms, tenant_name(p.tenant),
                          past ? "past_limit" : "at_limit", &judged);
    if (judged) judged_.Add(p.tenant);
    if (l.has_value()) out.Add(*std::move(l));
  }

  // The calibrated model on a first token at 0 ms for the at-limit prompt
  // (a finding) and at the model's own prediction (none).
  std::vector<ControlCase> Controls() const override {
    if (!prepared() || !view().calibration->latency.calibrated) return {};
    const Calibration& c = *view().calibration;
    const LatencyModel m = c.latency;
    const int tokens = c.base_tokens + c.at_limit_units * c.unit_tokens;
    const double plausible = m.base_ms + m.per_token_ms * tokens;
    const std::string tenant = view().tenants[0];
    auto judge = [=](double ttft_ms) {
      return [=](FindingSink& out) {
        auto l = JudgeLatency(m, tokens, ttft_ms, tenant, "control");
        if (l.has_value()) out.Add(*std::move(l));
      };
    };
    return {{"a first token at 0 ms", judge(0.0),
             [](const std::vector<Finding>& got) { return !got.empty(); }},
            {"a first token as calibrated", judge(plausible),
             [](const std::vector<Finding>& got) { return got.empty(); }}};
  }

  DetectorCoverage Coverage(int) const override {
    DetectorCoverage d;
    if (!prepared()) return d;
    const Calibration& cal = *view().calibration;
    d.coverage = judged_.Named(view().tenants);
    if (!cal.latency.failure.empty()) d.AddFailure(cal.latency.failure);
    if (cal.latency.calibrated) {
      d.notes.push_back(
          absl::StrFormat("prefill %.1f us/token, R² %.3f over %d lengths",
                          cal.latency.per_token_ms * 1000, cal.latency.r2,
                          cal.latency.lengths));
    }
    d.stats = {{"calibrated", cal.latency.calibrated},
               {"per_token_us", cal.latency.per_token_ms * 1000},
               {"base_ms", cal.latency.base_ms},
               {"r2", cal.latency.r2},
               {"lengths", cal.latency.lengths},
               {"samples", cal.latency_samples.size()}};
    return d;
  }

 private:
  TenantCounts judged_;
};
KVCANARY_REGISTER_DETECTOR(LatencyDetector);

}  // namespace
}  // namespace kvcanary::auditor
