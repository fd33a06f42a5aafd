#include "auditor/campaign/probe_mix.h"

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

TEST(ProbeMixTest, EveryKindReachesItsFloorFirst) {
  ProbeMix mix(1, {20, 10, 20, 20, 20, 10}, {3, 3, 2, 1, 1, 1});
  for (int i = 0; i < 100; ++i) mix.Next(0);
  EXPECT_EQ(mix.sent(0, ProbeKind::kPlant), 20);
  EXPECT_EQ(mix.sent(0, ProbeKind::kSniff), 10);
  EXPECT_EQ(mix.sent(0, ProbeKind::kGolden), 20);
  EXPECT_EQ(mix.sent(0, ProbeKind::kEcho), 20);
  EXPECT_EQ(mix.sent(0, ProbeKind::kAtLimit), 20);
  EXPECT_EQ(mix.sent(0, ProbeKind::kPastLimit), 10);
}

TEST(ProbeMixTest, ThenInProportionToTheWeights) {
  ProbeMix mix(1, {0, 0, 0, 0, 0, 0}, {3, 3, 2, 1, 1, 1});
  for (int i = 0; i < 1100; ++i) mix.Next(0);
  EXPECT_NEAR(mix.sent(0, ProbeKind::kPlant), 300, 2);
  EXPECT_NEAR(mix.sent(0, ProbeKind::kGolden), 200, 2);
  EXPECT_NEAR(mix.sent(0, ProbeKind::kEcho), 100, 2);
}

TEST(ProbeMixTest, DisabledKindsAreNeverSentAndTenantsAreSeparate) {
  ProbeMix mix(2, {5, 5, 5, 5, 5, 5}, {1, 1, 1, 1, 1, 1});
  mix.Disable(1, ProbeKind::kEcho);
  for (int i = 0; i < 60; ++i) {
    mix.Next(0);
    EXPECT_NE(mix.Next(1), ProbeKind::kEcho);
  }
  EXPECT_EQ(mix.sent(1, ProbeKind::kEcho), 0);
  EXPECT_EQ(mix.sent(0, ProbeKind::kEcho), 10);
}

TEST(ProbeMixTest, AZeroWeightKindIsOff) {
  ProbeMix mix(1, {5, 5, 5, 5, 5, 5}, {1, 1, 0, 1, 1, 1});
  for (int i = 0; i < 50; ++i) EXPECT_NE(mix.Next(0), ProbeKind::kGolden);
}

}  // namespace
}  // namespace kvcanary::auditor
