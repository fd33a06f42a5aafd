#include "engine/nodes/hangup_watch.h"

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

bool WaitUntil(const std::atomic<int>& n, int want) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (n.load() < want && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return n.load() >= want;
}

TEST(HangupWatchTest, RunsTheCallbackOnceWhenTheClientIsGone) {
  HangupWatch watch(absl::Milliseconds(1));
  std::atomic<bool> gone{false};
  std::atomic<int> calls{0};
  const HangupWatch::Scope scope =
      watch.Watch([&] { return gone.load(); }, [&] { ++calls; });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_FALSE(scope.fired());
  gone = true;
  ASSERT_TRUE(WaitUntil(calls, 1));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(scope.fired());
}

TEST(HangupWatchTest, NothingRunsOnceTheScopeIsGone) {
  HangupWatch watch(absl::Milliseconds(1));
  std::atomic<bool> gone{false};
  std::atomic<int> polls{0}, calls{0};
  {
    const HangupWatch::Scope scope = watch.Watch(
        [&] {
          ++polls;
          return gone.load();
        },
        [&] { ++calls; });
    ASSERT_TRUE(WaitUntil(polls, 2));
  }
  const int polled = polls.load();
  gone = true;
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(polls.load(), polled);
  EXPECT_EQ(calls.load(), 0);
}

TEST(HangupWatchTest, AnUnsetProbeIsNeverPolled) {
  HangupWatch watch(absl::Milliseconds(1));
  std::atomic<int> calls{0};
  const HangupWatch::Scope scope = watch.Watch(nullptr, [&] { ++calls; });
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_FALSE(scope.fired());
}

}  // namespace
}  // namespace kvcanary::engine
