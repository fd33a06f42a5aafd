// Detectors driven as a campaign drives them, without a target: a
// registered detector made from the registry, prepared on a calibration and
// a compiled scanner, fed answers, and judged (auditor/detectors/).
#ifndef KVCANARY_TESTS_AUDITOR_DETECTORS_HARNESS_H_
#define KVCANARY_TESTS_AUDITOR_DETECTORS_HARNESS_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "auditor/detectors/broken.h"
#include "auditor/detectors/detector.h"
#include "auditor/detectors/registry.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor::testing {

inline const std::vector<std::string> kTenants = {"acme", "globex"};

// Three golden variants, an echoing nonce per tenant, a calibrated prefill
// cost (0.1 ms/token: 25.6 ms at the limit), a limit of 256 tokens in units
// of 6, whole plants of 200 tokens; golden log-probabilities and a scored
// prompt whose two answers alone were bitwise the same.
inline Calibration GoodCalibration() {
  Calibration c;
  c.golden = {{0, "a"}, {1, "b"}, {2, "c"}};
  c.nonces = {canaries::DeriveNonce("k", "acme", "c", 0),
              canaries::DeriveNonce("k", "globex", "c", 0)};
  c.latency.calibrated = true;
  c.latency.base_ms = 5;
  c.latency.per_token_ms = 0.1;
  c.latency.lengths = 4;
  c.unit_tokens = 6;
  c.base_tokens = 10;
  c.at_limit_units = 41;    // 256 tokens
  c.past_limit_units = 60;  // 370 tokens
  c.limit.prompt_tokens = c.limit.refuse_above = 256;
  c.plants.resize(2);
  const std::vector<AnswerLogprob> positions = {
      {"Once", -0.25, {{"Once", -0.25}, {"One", -1.5}}},
      {" upon", -0.125, {{" upon", -0.125}, {" a", -2.25}}}};
  for (LogprobCalibration* l : {&c.golden_logprobs, &c.scored}) {
    l->mode = LogprobMode::kExact;
    l->alone = {{0, positions}, {1, positions}};
  }
  return c;
}

class Harness {
 public:
  explicit Harness(Calibration cal = GoodCalibration())
      : cal_(std::move(cal)), scanner_(canaries::kDefaultMinPartialWords) {
    for (int t = 0; t < 2; ++t) {
      const canaries::Marker m =
          canaries::DeriveMarker("key", kTenants[t], "campaign", 0);
      scanner_.Add(m, kTenants[t]);
      view_.control_markers.push_back(m);
    }
    EXPECT_TRUE(scanner_.Compile().ok());
    view_.tenants = kTenants;
    view_.calibration = &cal_;
    view_.scanner = &scanner_;
  }

  // A registered detector, prepared (`broken`: behind --test-break's
  // decorator).
  std::unique_ptr<Detector> Make(const std::string& name,
                                 bool broken = false) const {
    for (const auto& e : DetectorRegistry::Global().Entries()) {
      if (e.spec.name != name) continue;
      std::unique_ptr<Detector> d = e.make();
      if (broken) d = BreakDetector(std::move(d));
      d->Prepare(view_);
      return d;
    }
    ADD_FAILURE() << "no detector " << name;
    return nullptr;
  }

  // `n` answers of `kind` to every tenant, each `answer` (its text, counts
  // and timing), judged by `d`; returns what it found.
  std::vector<Finding> Feed(Detector& d, ProbeKind kind, int n,
                            const Completion& answer, bool stream = false,
                            int predicted = 0) {
    FindingList found;
    for (int i = 0; i < n; ++i) {
      for (int t = 0; t < static_cast<int>(kTenants.size()); ++t) {
        Probe p;
        p.id = next_id_++;
        p.kind = kind;
        p.tenant = t;
        p.stream = stream;
        p.predicted = predicted;
        p.golden_variant = i % 3;
        Completion c = answer;
        if (kind == ProbeKind::kGolden) c.text = cal_.golden.at(i % 3);
        if (kind == ProbeKind::kEcho) c.text = cal_.nonces[t]->text;
        d.Judge(p, c, {}, found);
      }
    }
    return found.findings;
  }

  // `n` timed pairs per tenant (DetectorSpec::paired): a probe of `kind`
  // answered `probe`, then its at-limit control answered `control`, both
  // streamed, judged by `d`; returns what it found (its Finish included).
  std::vector<Finding> FeedPairs(Detector& d, ProbeKind kind, int n,
                                 const Completion& probe,
                                 const Completion& control, int predicted) {
    FindingList found;
    for (int i = 0; i < n; ++i) {
      for (int t = 0; t < static_cast<int>(kTenants.size()); ++t) {
        Probe p;
        p.kind = kind;
        p.tenant = t;
        p.stream = true;
        p.predicted = predicted;
        p.pair = next_pair_++;
        Probe c = p;
        c.kind = ProbeKind::kAtLimit;
        c.control = true;
        p.id = next_id_++;
        c.id = next_id_++;
        d.Judge(p, probe, {}, found);
        d.Judge(c, control, {}, found);
      }
    }
    CampaignIo io;
    EXPECT_TRUE(d.Finish(io, found).ok());
    return found.findings;
  }

  const Calibration& cal() const { return cal_; }

 private:
  Calibration cal_;
  canaries::MarkerScanner scanner_;
  CampaignView view_;
  int64_t next_id_ = 0, next_pair_ = 0;
};

// A usable answer.
inline Completion Answer(const std::string& text, int prompt_tokens,
                         double ttft_ms = 0) {
  Completion c;
  c.status = 200;
  c.usable = true;
  c.text = text;
  c.prompt_tokens = prompt_tokens;
  c.ttft_ms = ttft_ms;
  return c;
}

// The coverage `d` states, judged as a campaign with --floor `floor` and
// its control's outcome would judge it.
inline DetectorCoverage Judged(const Detector& d, int floor,
                               std::set<std::string> required = {}) {
  CoverageRules rules;
  rules.tenants = kTenants;
  rules.settings.floors = {{"", floor}, {d.spec().name, floor}};
  rules.required = std::move(required);
  rules.control = RunControl(d);
  return JudgedCoverage(d, rules);
}

}  // namespace kvcanary::auditor::testing

#endif  // KVCANARY_TESTS_AUDITOR_DETECTORS_HARNESS_H_
