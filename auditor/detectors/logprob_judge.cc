#include "auditor/detectors/logprob_judge.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvcanary::auditor {

nlohmann::json LogprobDiff::ToJson() const {
  return {{"expected_positions", expected_positions},
          {"got_positions", got_positions},
          {"first_difference", first_difference},
          {"tokens_differ", tokens_differ},
          {"max_delta", max_delta},
          {"context_delta", context_delta}};
}

LogprobDiff CompareLogprobs(const std::vector<AnswerLogprob>& alone,
                            const std::vector<AnswerLogprob>& got) {
  LogprobDiff d;
  d.expected_positions = static_cast<int>(alone.size());
  d.got_positions = static_cast<int>(got.size());
  const size_t n = std::min(alone.size(), got.size());
  // Into max_delta, and into context_delta while the answers so far agree.
  auto delta = [&d](const std::optional<double>& a,
                    const std::optional<double>& b) {
    if (!a.has_value() || !b.has_value()) return;
    const double x = std::fabs(*a - *b);
    d.max_delta = std::max(d.max_delta, x);
    if (!d.tokens_differ) d.context_delta = std::max(d.context_delta, x);
  };
  auto alternatives = [&](size_t i) {
    for (const auto& [text, figure] : alone[i].top) {
      for (const auto& [other, other_figure] : got[i].top) {
        if (other == text) delta(figure, other_figure);
      }
    }
  };
  for (size_t i = 0; i < n; ++i) {
    if (!(alone[i] == got[i]) && d.first_difference < 0) {
      d.first_difference = static_cast<int>(i);
    }
    if (alone[i].token != got[i].token) {
      // The same context on both sides up to here: its alternatives still
      // compare; past it, nothing does.
      alternatives(i);
      d.tokens_differ = true;
      continue;
    }
    delta(alone[i].logprob, got[i].logprob);
    alternatives(i);
  }
  if (alone.size() != got.size() && d.first_difference < 0) {
    d.first_difference = static_cast<int>(n);
  }
  d.same = d.first_difference < 0;
  return d;
}

double LogprobDistance(const LogprobDiff& d) {
  if (d.expected_positions == 0 || d.got_positions == 0) {
    return std::numeric_limits<double>::infinity();
  }
  return d.context_delta;
}

void DistanceRates::Add(bool baseline, double distance) {
  (baseline ? base_ : cross_).push_back(distance);
}

std::optional<DistanceRates::Verdict> DistanceRates::Judge() const {
  if (base_n() < kMinRateProbes || cross_n() < kMinRateProbes) {
    return std::nullopt;
  }
  std::vector<double> sorted = base_;
  std::sort(sorted.begin(), sorted.end());
  Verdict v;
  const size_t at = (sorted.size() * 9 + 9) / 10 - 1;  // ceil(0.9 n) - 1
  v.threshold = sorted[at];
  auto above = [&v](double d) { return d > v.threshold; };
  v.base_above =
      static_cast<int>(std::count_if(base_.begin(), base_.end(), above));
  v.cross_above =
      static_cast<int>(std::count_if(cross_.begin(), cross_.end(), above));
  v.rise = JudgeRateRise(v.base_above, base_n(), v.cross_above, cross_n());
  return v;
}

LogprobDiff LogprobDetector::Closest(
    int variant, const std::vector<AnswerLogprob>& got) const {
  const LogprobCalibration& cal = calibrated();
  LogprobDiff best = CompareLogprobs(cal.alone.at(variant), got);
  auto also = cal.also.find(variant);
  if (best.same || also == cal.also.end()) return best;
  for (const std::vector<AnswerLogprob>& alone : also->second) {
    LogprobDiff d = CompareLogprobs(alone, got);
    if (d.same || LogprobDistance(d) < LogprobDistance(best)) {
      best = std::move(d);
    }
    if (best.same) break;
  }
  return best;
}

std::optional<Finding> LogprobDetector::JudgeOne(
    int variant, const std::string& tenant,
    const std::vector<AnswerLogprob>& got) const {
  const LogprobCalibration& cal = calibrated();
  const LogprobDiff d = Closest(variant, got);
  const Names n = names();
  Finding f;
  f.detector = n.detector;
  f.reader = tenant;
  f.group = {{"variant", variant}};
  f.detail = d.ToJson();
  f.detail["tenant"] = tenant;
  f.detail["variant"] = variant;
  if (n.fewer != nullptr && d.got_positions < d.expected_positions) {
    // Fewer positions than alone: less of the prompt was processed.
    f.kind = n.fewer;
    f.severity = Severity::kHigh;
    return f;
  }
  if (cal.by_distance.count(variant) > 0 || d.same) return std::nullopt;
  f.kind = n.mismatch;
  f.severity = Severity::kMedium;
  return f;
}

std::optional<Finding> LogprobDetector::JudgeRates(
    const DistanceRates& rates) const {
  const std::optional<DistanceRates::Verdict> v = rates.Judge();
  if (!v.has_value() || !v->rise.rises) return std::nullopt;
  Finding f;
  f.detector = names().detector;
  f.kind = names().rate;
  f.severity = Severity::kHigh;
  f.detail = {
      {"threshold", std::isinf(v->threshold) ? nlohmann::json(nullptr)
                                             : nlohmann::json(v->threshold)},
      {"baseline_above", v->base_above},
      {"baseline_probes", rates.base_n()},
      {"cross_tenant_above", v->cross_above},
      {"cross_tenant_probes", rates.cross_n()},
      {"standard_error", v->rise.standard_error}};
  return f;
}

void LogprobDetector::Judge(const Probe& p, const Completion& c,
                            const std::vector<Finding>& earlier,
                            FindingSink& out) {
  const LogprobCalibration& cal = calibrated();
  if (p.kind != names().kind || !c.usable || cal.mode == LogprobMode::kOff ||
      cal.alone.count(p.golden_variant) == 0) {
    return;
  }
  if (!c.logprobs.present || !c.logprobs.malformed.empty()) {
    ++without_logprobs_;
    return;
  }
  compared_.Add(p.tenant);
  std::optional<Finding> f =
      JudgeOne(p.golden_variant, tenant_name(p.tenant), c.logprobs.positions);
  if (cal.by_distance.count(p.golden_variant) > 0 &&
      (!f.has_value() || f->kind != names().fewer)) {
    rates_.Add(p.baseline, LogprobDistance(Closest(p.golden_variant,
                                                   c.logprobs.positions)));
  }
  if (!f.has_value()) return;
  // A foreign marker the output scan found in the same answer.
  if (std::any_of(earlier.begin(), earlier.end(), [](const Finding& e) {
        return e.detector == "output_scan";
      })) {
    f->severity = Severity::kCritical;
  }
  out.Add(*std::move(f));
}

absl::Status LogprobDetector::Finish(CampaignIo&, FindingSink& out) {
  if (prepared() && calibrated().mode == LogprobMode::kDistance) {
    if (std::optional<Finding> f = JudgeRates(rates_)) out.Add(*std::move(f));
  }
  return absl::OkStatus();
}

std::vector<ControlCase> LogprobDetector::Controls() const {
  const LogprobCalibration& cal = calibrated();
  if (!prepared() || cal.alone.empty()) return {};
  // A variant judged bitwise where there is one.
  auto it = cal.alone.begin();
  while (std::next(it) != cal.alone.end() && cal.by_distance.count(it->first)) {
    ++it;
  }
  const auto& [variant, alone] = *it;
  const std::string tenant = view().tenants[0];
  const int v = variant;
  // The first figure one step off (the smallest change a contaminated
  // attention makes), and the answer cut by a position.
  std::vector<AnswerLogprob> nudged = alone, cut = alone;
  for (AnswerLogprob& a : nudged) {
    if (!a.logprob.has_value()) continue;
    a.logprob = std::nextafter(*a.logprob, -1e9);
    break;
  }
  cut.pop_back();
  auto judge = [this, v, tenant](std::vector<AnswerLogprob> got) {
    return [this, v, tenant, got](FindingSink& out) {
      if (auto f = JudgeOne(v, tenant, got)) out.Add(*f);
    };
  };
  auto rates = [this](double cross) {
    return [this, cross](FindingSink& out) {
      DistanceRates r;
      for (int i = 0; i < 20; ++i) r.Add(true, i * 1e-6);
      for (int i = 0; i < 20; ++i) r.Add(false, i % 2 ? cross : i * 1e-6);
      if (auto f = JudgeRates(r)) out.Add(*f);
    };
  };
  auto found = [](const std::vector<Finding>& got) { return !got.empty(); };
  auto none = [](const std::vector<Finding>& got) { return got.empty(); };
  std::vector<ControlCase> cases = {
      {"the positions given alone", judge(alone), none}};
  if (cal.by_distance.count(v) == 0) {
    cases.push_back({"a figure one step off", judge(nudged), found});
  }
  if (!cal.by_distance.empty()) {
    cases.push_back({"distances rising under cross-tenant load",
                     rates(std::numeric_limits<double>::infinity()), found});
    cases.push_back({"distances as under same-tenant load", rates(0), none});
  }
  if (names().fewer != nullptr && !alone.empty()) {
    cases.push_back({"a position fewer than alone", judge(cut), found});
  }
  return cases;
}

// What distance mode can see here: disabled where it is blind (a
// baseline threshold no answer can pass, or only a rise over kBlindRise
// visible) and no variant is judged bitwise; a note where some are.
void LogprobDetector::DistanceCoverage(bool all_by_distance,
                                       DetectorCoverage* d) const {
  const std::optional<DistanceRates::Verdict> v = rates_.Judge();
  if (!v.has_value()) {
    d->AddFailure(absl::StrCat("distance mode needs ", kMinRateProbes,
                               " answers a side, got ", rates_.base_n(),
                               " same-tenant and ", rates_.cross_n(),
                               " cross-tenant"));
    return;
  }
  const std::string blind =
      std::isinf(v->threshold)
          ? "the 90th percentile of same-tenant distances is infinite "
            "(answers without a position), so no answer can exceed it"
          : BlindRateReason(v->base_above, rates_.base_n(), rates_.cross_n(),
                            "answers were farther from alone than its 90th "
                            "percentile");
  if (blind.empty()) {
    d->notes.push_back(absl::StrFormat(
        "sees a rise of %.0f points or more in answers farther from alone "
        "than %.3g",
        *SmallestDetectableRise(v->base_above, rates_.base_n(),
                                rates_.cross_n()) *
            100,
        v->threshold));
  } else if (all_by_distance) {
    d->disabled = absl::StrCat("blind on this target: ", blind);
  } else {
    d->notes.push_back(
        absl::StrCat("the distance-mode variants are blind on "
                     "this target (",
                     blind, "); the others are judged bitwise"));
  }
}

DetectorCoverage LogprobDetector::Coverage(int) const {
  DetectorCoverage d;
  if (!prepared()) return d;
  const LogprobCalibration& cal = calibrated();
  if (cal.mode == LogprobMode::kOff) {
    d.disabled = cal.disabled.empty() ? "not calibrated" : cal.disabled;
    return d;
  }
  d.coverage = compared_.Named(view().tenants);
  const size_t exact = cal.alone.size() - cal.by_distance.size();
  if (exact > 0) {
    d.notes.push_back(absl::StrCat(
        "exact: ", exact, " of ", cal.alone.size(),
        " variants' answers alone and under same-tenant load were bitwise "
        "the same, so every answer under load must be"));
  }
  if (!cal.by_distance.empty()) {
    d.notes.push_back(absl::StrCat(
        "distance: ", cal.by_distance.size(), " of ", cal.alone.size(),
        " variants' answers differ alone or under same-tenant load (",
        cal.moved_under_load.size(),
        " only under load), so each answer's distance from the "
        "one alone is judged against same-tenant load's (a finding when the "
        "share above its 90th percentile rises by 5 points and 3 standard "
        "errors: under 0.14% of healthy campaigns)"));
    DistanceCoverage(exact == 0, &d);
  }
  if (without_logprobs_ > 0) {
    d.notes.push_back(absl::StrCat(without_logprobs_,
                                   " usable answers under load carried no "
                                   "log-probabilities (not compared)"));
  }
  d.stats = {{"mode", LogprobModeName(cal.mode)},
             {"variants", cal.alone.size()},
             {"distance_variants", cal.by_distance.size()},
             {"moved_under_load", cal.moved_under_load.size()},
             {"without_logprobs", without_logprobs_},
             {"baseline_probes", rates_.base_n()},
             {"cross_tenant_probes", rates_.cross_n()}};
  return d;
}

}  // namespace kvcanary::auditor
