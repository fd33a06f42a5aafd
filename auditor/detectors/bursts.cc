// The burst exercise: after the load, a few bursts of many requests
// started at once, every tenant in each — more transfers in flight than a
// split engine's transfer (metadata) slots, where metadata-slot-reuse and
// kin live, and churn of the page pool and prefix cache. It finds nothing
// itself: the burst's answers go through every other detector (another
// tenant's marker or K/V in an answer, a trace's foreign reads). Its
// coverage says the bursts ran (`--require bursts`). docs/auditor.md,
// "Exercises".
#include <map>
#include <set>

#include "absl/strings/str_format.h"
#include "auditor/detectors/registry.h"

namespace kvcanary::auditor {
namespace {

// Twice the decode node's default metadata slots (16) in ours; vLLM's and
// SGLang's disaggregated connectors size theirs by the batch, at least as
// large as this.
constexpr int kBurstSize = 32;
constexpr int kBursts = 3;

class BurstsExercise : public DetectorOf<BurstsExercise> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "bursts";
    s.summary = absl::StrFormat(
        "an exercise: %d bursts of %d requests started at once, every tenant "
        "in each (more transfers in flight than a split engine's slots; "
        "what they mix up, the other detectors find)",
        kBursts, kBurstSize);
    s.unit = "bursts answered in";
    s.order = 90;
    s.default_floor = 2;
    s.exercise = true;
    s.required_by_default = false;
    s.burst_size = kBurstSize;
    s.bursts = kBursts;
    return s;
  }

  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink&) override {
    if (p.burst < 0) return;
    ++sent_;
    if (c.status == 0) return;  // no answer: the burst did not reach it
    ++answered_;
    if (answered_in_[p.tenant].insert(p.burst).second) done_.Add(p.tenant);
  }

  // Nothing to find, so no control: its coverage counts what it did.
  std::vector<ControlCase> Controls() const override { return {}; }

  DetectorCoverage Coverage(int) const override {
    DetectorCoverage d;
    if (!prepared()) return d;
    d.coverage = done_.Named(view().tenants);
    d.notes.push_back(absl::StrFormat(
        "%d bursts of %d requests started at once, a second apart: %d of "
        "%d requests answered",
        kBursts, kBurstSize, answered_, sent_));
    d.stats = {{"burst_size", kBurstSize},
               {"bursts", kBursts},
               {"sent", sent_},
               {"answered", answered_}};
    return d;
  }

 private:
  int sent_ = 0, answered_ = 0;
  std::map<int, std::set<int64_t>> answered_in_;  // tenant -> bursts
  TenantCounts done_;
};
KVCANARY_REGISTER_DETECTOR(BurstsExercise);

}  // namespace
}  // namespace kvcanary::auditor
