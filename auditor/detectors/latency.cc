#include "auditor/detectors/latency.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/detectors/registry.h"
#include "common/stats.h"

namespace kvcanary::auditor {

bool CutThenCached(const TimedPair& p) {
  return p.predicted > 0 && p.probe_tokens < p.predicted && p.cached_tokens > 0;
}

bool Comparable(const TimedPair& p) {
  return p.probe_ttft_ms > 0 && p.control_ttft_ms > 0 &&
         p.probe_tokens * 10 >= p.control_tokens * 9 && !CutThenCached(p);
}

int PairsToDecide(double alpha) {
  return static_cast<int>(std::ceil(-std::log2(alpha)));
}

SignTest TestPairs(const std::vector<TimedPair>& pairs) {
  SignTest t;
  std::vector<double> ratios;
  for (const TimedPair& p : pairs) {
    if (!Comparable(p)) continue;
    ++t.pairs;
    t.faster += p.probe_ttft_ms < kFasterShare * p.control_ttft_ms;
    ratios.push_back(p.probe_ttft_ms / p.control_ttft_ms);
  }
  t.p_value = BinomialTail(t.pairs, 0.5, t.faster);
  if (!ratios.empty()) {
    std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2,
                     ratios.end());
    t.median_ratio = ratios[ratios.size() / 2];
  }
  return t;
}

std::optional<Finding> JudgePairs(const std::vector<TimedPair>& pairs,
                                  const std::string& group,
                                  const std::vector<std::string>& tenants,
                                  double alpha) {
  const SignTest t = TestPairs(pairs);
  if (t.faster == 0 || t.p_value > alpha) return std::nullopt;
  // What the target said of the faster probes: the cause, where it shows.
  std::set<std::string> readers;
  std::vector<int64_t> probes;
  int cut = 0, cached = 0;
  for (const TimedPair& p : pairs) {
    if (!Comparable(p) || p.probe_ttft_ms >= kFasterShare * p.control_ttft_ms) {
      continue;
    }
    readers.insert(tenants[p.tenant]);
    probes.push_back(p.probe);
    cut += p.predicted > 0 && p.probe_tokens < p.predicted;
    cached += p.cached_tokens > 0;
  }
  const bool most_cut = 2 * cut > t.faster, most_cached = 2 * cached > t.faster;
  // (A probe both cut and cached is never judged: Comparable.)
  const char* cause = most_cached ? "cached_prefix"
                      : most_cut  ? "truncated_prompt"
                                  : "prompt_not_prefilled";
  Finding f;
  f.detector = "latency";
  f.kind = "latency_implausible";
  f.severity = Severity::kMedium;
  f.reader = absl::StrJoin(readers, ",");
  f.group = {{"template", group}, {"cause", cause}};
  f.detail = {{"template", group},
              {"cause", cause},
              {"pairs", t.pairs},
              {"faster", t.faster},
              {"faster_share", kFasterShare},
              {"p_value", t.p_value},
              {"alpha", alpha},
              {"median_ttft_ratio", t.median_ratio},
              {"cut_by_target", cut},
              {"served_cached_tokens", cached},
              {"tenants", readers},
              {"probes", probes}};
  return f;
}

namespace {

const char* GroupName(ProbeKind k) {
  return k == ProbeKind::kPastLimit ? "past_limit" : "at_limit";
}

class LatencyDetector : public DetectorOf<LatencyDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "latency";
    s.summary =
        "a first token too fast for the prompt the target claims to have "
        "read, against a control sent beside it";
    s.unit = "timed pairs judged";
    s.order = 50;
    s.default_floor = 5;
    s.paired = {ProbeKind::kAtLimit, ProbeKind::kPastLimit};
    s.paired_at_least = kPairsPerGroup;
    return s;
  }

  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink&) override {
    if (p.pair < 0) return;
    Half& h = halves_[p.pair];
    const bool timed = p.stream && c.usable && c.ttft_ms > 0;
    if (p.control) {
      h.control = timed;
      h.pair.control_ttft_ms = c.ttft_ms;
      h.pair.control_tokens = c.prompt_tokens;
    } else {
      h.probe = timed;
      h.pair.kind = p.kind;
      h.pair.tenant = p.tenant;
      h.pair.probe = p.id;
      h.pair.probe_ttft_ms = c.ttft_ms;
      h.pair.probe_tokens = c.prompt_tokens;
      h.pair.predicted = p.predicted;
      h.pair.cached_tokens = c.cached_tokens;
    }
    if (++h.seen < 2) return;
    if (h.probe && h.control) {
      pairs_.push_back(h.pair);
      if (Comparable(h.pair)) judged_.Add(h.pair.tenant);
      cut_then_cached_ += CutThenCached(h.pair);
    }
    halves_.erase(p.pair);
  }

  absl::Status Finish(CampaignIo&, FindingSink& out) override {
    for (const ProbeKind kind : spec().paired) {
      std::vector<TimedPair> group;
      for (const TimedPair& p : pairs_) {
        if (p.kind == kind) group.push_back(p);
      }
      tests_[GroupName(kind)] = TestPairs(group);
      auto f = JudgePairs(group, GroupName(kind), view().tenants, Alpha());
      if (f.has_value()) out.Add(*std::move(f));
    }
    return absl::OkStatus();
  }

  // The same judgement on pairs made up: every probe at a tenth of its
  // control's time (a finding), and probes as fast as their controls,
  // half 5% faster and half 5% slower (none).
  std::vector<ControlCase> Controls() const override {
    if (!prepared()) return {};
    const std::vector<std::string> tenants = view().tenants;
    const int n = spec().paired_at_least;
    const double alpha = Alpha();
    auto judge = [=](double fast, double slow) {
      return [=](FindingSink& out) {
        std::vector<TimedPair> pairs(n);
        for (int i = 0; i < n; ++i) {
          pairs[i].tenant = i % static_cast<int>(tenants.size());
          pairs[i].probe = i;
          pairs[i].probe_tokens = pairs[i].control_tokens = 256;
          pairs[i].control_ttft_ms = 30;
          pairs[i].probe_ttft_ms = 30 * (i % 2 == 0 ? fast : slow);
        }
        auto f = JudgePairs(pairs, "control", tenants, alpha);
        if (f.has_value()) out.Add(*std::move(f));
      };
    };
    return {
        {"every probe at a tenth of its control's first-token time",
         judge(0.1, 0.1),
         [](const std::vector<Finding>& got) { return got.size() == 1; }},
        {"probes as fast as their controls, give or take 5%", judge(0.95, 1.05),
         [](const std::vector<Finding>& got) { return got.empty(); }}};
  }

  DetectorCoverage Coverage(int) const override {
    DetectorCoverage d;
    if (!prepared()) return d;
    const Calibration& cal = *view().calibration;
    d.coverage = judged_.Named(view().tenants);
    // A first-token time that does not grow with the prompt cannot show a
    // prompt that was not read, however many pairs were judged.
    if (!cal.latency.failure.empty()) d.AddFailure(cal.latency.failure);
    nlohmann::json stats = {{"alpha", kLatencyAlpha},
                            {"faster_share", kFasterShare}};
    for (const auto& [group, t] : tests_) {
      d.notes.push_back(absl::StrFormat(
          "%s: %d pairs, %d faster (p = %.2g; a finding at p <= %g)", group,
          t.pairs, t.faster, t.p_value, Alpha()));
      stats[group + "_pairs"] = t.pairs;
      stats[group + "_faster"] = t.faster;
      stats[group + "_p_value"] = t.p_value;
      stats[group + "_median_ttft_ratio"] = t.median_ratio;
    }
    if (cut_then_cached_ > 0) {
      d.notes.push_back(absl::StrFormat(
          "%d pairs not judged: the target cut the probe's prompt, its "
          "cache-busting head with it, and served cached tokens (cache-audit "
          "says whose cache)",
          cut_then_cached_));
    }
    stats["cut_then_cached_pairs"] = cut_then_cached_;
    d.notes.push_back(absl::StrFormat(
        "sign test against controls sent beside each probe: a false alarm "
        "at most %g per campaign",
        kLatencyAlpha));
    if (cal.latency.calibrated) {
      d.notes.push_back(
          absl::StrFormat("prefill %.1f us/token, R² %.3f over %d lengths",
                          cal.latency.per_token_ms * 1000, cal.latency.r2,
                          cal.latency.lengths));
    }
    stats["calibrated"] = cal.latency.calibrated;
    stats["per_token_us"] = cal.latency.per_token_ms * 1000;
    stats["base_ms"] = cal.latency.base_ms;
    stats["r2"] = cal.latency.r2;
    stats["lengths"] = cal.latency.lengths;
    stats["samples"] = cal.latency_samples.size();
    d.stats = std::move(stats);
    return d;
  }

 private:
  // Each group's share of the campaign's false-alarm probability.
  double Alpha() const { return kLatencyAlpha / spec().paired.size(); }

  struct Half {
    TimedPair pair;
    bool probe = false, control = false;  // answered and timed
    int seen = 0;
  };
  std::map<int64_t, Half> halves_;  // pairs with one answer so far
  std::vector<TimedPair> pairs_;    // both answered and timed
  std::map<std::string, SignTest> tests_;
  TenantCounts judged_;
  int cut_then_cached_ = 0;  // pairs not judged for that
};
KVCANARY_REGISTER_DETECTOR(LatencyDetector);

}  // namespace
}  // namespace kvcanary::auditor
