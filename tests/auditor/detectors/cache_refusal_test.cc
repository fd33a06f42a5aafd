#include "auditor/detectors/cache_refusal.h"

#include "gtest/gtest.h"
#include "tests/auditor/detectors/harness.h"

namespace kvcanary::auditor::testing {
namespace {

RefusalRounds Rounds(int cross_failed, int cross, int control_failed,
                     int control) {
  RefusalRounds r;
  r.cross = cross;
  r.cross_failed = cross_failed;
  r.control = control;
  r.control_failed = control_failed;
  r.writers = {"acme"};
  r.readers = {"globex"};
  return r;
}

TEST(CacheRefusalTest, CrossProbesRefusedBesideAnsweredControlsAreAFinding) {
  auto f = JudgeRefusals(Rounds(18, 18, 0, 18), kRefusalAlpha);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->kind, "cross_tenant_cache_refusal");
  EXPECT_EQ(f->writer, "acme");
  EXPECT_EQ(f->reader, "globex");
  EXPECT_LE(f->detail["p_value"].get<double>(), 1e-9);
}

TEST(CacheRefusalTest, RefusalsOnBothSidesAlikeAreNone) {
  // A busy target refusing some of everything.
  EXPECT_FALSE(JudgeRefusals(Rounds(5, 18, 4, 18), kRefusalAlpha).has_value());
  EXPECT_FALSE(JudgeRefusals(Rounds(0, 18, 0, 18), kRefusalAlpha).has_value());
  // Too few rounds to decide at alpha, however lopsided.
  EXPECT_FALSE(JudgeRefusals(Rounds(3, 3, 0, 3), kRefusalAlpha).has_value());
}

TEST(CacheRefusalTest, ItsControlPassesAndABrokenOneFails) {
  Harness h;
  EXPECT_EQ(RunControl(*h.Make("cache_refusal")), std::optional<bool>(true));
  EXPECT_EQ(RunControl(*h.Make("cache_refusal", /*broken=*/true)),
            std::optional<bool>(false));
}

}  // namespace
}  // namespace kvcanary::auditor::testing
