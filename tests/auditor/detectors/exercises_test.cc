// The exercises (hangups, bursts): they find nothing, have no control, and
// count only what they did — a hang-up the target answered first is no
// hang-up, a burst probe with no answer was not in the burst.
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/auditor/detectors/harness.h"

namespace kvcanary::auditor::testing {
namespace {

Completion HungUp() {
  Completion c;
  c.hung_up = true;
  c.error = absl::CancelledError("hung up on purpose");
  return c;
}

TEST(HangupsExerciseTest, CountsOnlyHangupsBeforeTheAnswerEndedPerStage) {
  Harness h;
  auto d = h.Make("hangups");
  EXPECT_TRUE(d->spec().exercise);
  EXPECT_FALSE(d->spec().required_by_default);
  EXPECT_TRUE(d->Controls().empty());
  std::vector<Finding> found;
  FindingList out;
  int64_t id = 0;
  for (int t = 0; t < 2; ++t) {
    for (int s = 0; s < kHangupStages; ++s) {
      Probe p;
      p.id = id++;
      p.kind = ProbeKind::kHangup;
      p.tenant = t;
      p.hangup = static_cast<HangupStage>(s);
      // acme's decode-stage hang-up came too late: the answer was whole.
      const bool late = t == 0 && p.hangup == HangupStage::kDecode;
      d->Judge(p, late ? Answer("done", 200) : HungUp(), found, out);
    }
  }
  EXPECT_TRUE(out.findings.empty());
  const DetectorCoverage c = Judged(*d, 4, {"hangups"});
  EXPECT_EQ(c.coverage.at("acme"), 3);
  EXPECT_EQ(c.coverage.at("globex"), 4);
  EXPECT_EQ(c.stats["decode_sent"], 2);
  EXPECT_EQ(c.stats["decode_hung_up"], 1);
  EXPECT_EQ(c.stats["queued_hung_up"], 2);
  // Required, acme under its floor: not active.
  EXPECT_NE(c.state, DetectorState::kActive);
}

TEST(BurstsExerciseTest, CountsTheBurstsEachTenantWasAnsweredIn) {
  Harness h;
  auto d = h.Make("bursts");
  EXPECT_TRUE(d->spec().exercise);
  EXPECT_GT(d->spec().burst_size, 16);  // beyond our engine's 16 slots
  EXPECT_GT(d->spec().bursts, 0);
  std::vector<Finding> found;
  FindingList out;
  int64_t id = 0;
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 4; ++i) {
      Probe p;
      p.id = id++;
      p.kind = ProbeKind::kSniff;
      p.tenant = i % 2;
      p.burst = b;
      Completion c = Answer("x", 10);
      // globex got no answer at all in the second burst.
      if (b == 1 && p.tenant == 1) c = Completion();
      d->Judge(p, c, found, out);
    }
  }
  // A probe outside any burst is not counted.
  Probe other;
  other.tenant = 1;
  d->Judge(other, Answer("x", 10), found, out);
  EXPECT_TRUE(out.findings.empty());
  const DetectorCoverage c = Judged(*d, 2);
  EXPECT_EQ(c.coverage.at("acme"), 2);
  EXPECT_EQ(c.coverage.at("globex"), 1);
  EXPECT_EQ(c.stats["sent"], 8);
  EXPECT_EQ(c.stats["answered"], 6);
}

}  // namespace
}  // namespace kvcanary::auditor::testing
