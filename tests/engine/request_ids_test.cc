// Request ids: a random epoch per router start in the high bits, a counter
// in the low 40, never 0 nor the reserved 2^64 - 1.
#include "engine/nodes/request_ids.h"

#include <set>
#include <thread>
#include <vector>

#include "common/page_stamp.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

constexpr uint64_t kLowMask = (uint64_t{1} << kRequestIdCounterBits) - 1;
constexpr uint32_t kMaxEpoch = (uint32_t{1} << kRequestIdEpochBits) - 1;

TEST(RequestIdsTest, EpochInTheHighBitsCounterFromOneInTheLow) {
  EXPECT_EQ(ComposeRequestId(0, 0), RequestId(1));
  EXPECT_EQ(ComposeRequestId(0, 41), RequestId(42));
  EXPECT_EQ(ComposeRequestId(5, 0).value(),
            (uint64_t{5} << kRequestIdCounterBits) | 1);
  EXPECT_EQ(RequestIdEpoch(ComposeRequestId(1234567, 99)), 1234567u);
}

TEST(RequestIdsTest, NeverZeroNorReservedAtTheEdges) {
  for (uint32_t epoch : {0u, 1u, kMaxEpoch, ~0u}) {
    for (uint64_t n : {uint64_t{0}, kLowMask - 2, kLowMask - 1, kLowMask,
                       kLowMask + 1, ~uint64_t{0}, ~uint64_t{0} - 1}) {
      const RequestId id = ComposeRequestId(epoch, n);
      EXPECT_NE(id, kNoRequest) << epoch << " " << n;
      EXPECT_NE(id, kReservedRequestId) << epoch << " " << n;
      EXPECT_NE(id.value() & kLowMask, 0u);
      EXPECT_NE(id.value() & kLowMask, kLowMask);
      EXPECT_EQ(RequestIdEpoch(id), epoch & kMaxEpoch);
    }
  }
}

TEST(RequestIdsTest, FitsASignedSixtyFourBitInteger) {
  EXPECT_LT(ComposeRequestId(~0u, ~uint64_t{0}).value(), uint64_t{1} << 63);
}

TEST(RequestIdsTest, CounterWrapsToOneNotZero) {
  // 2^40 - 2 ids per epoch, then the counter starts again at 1.
  EXPECT_EQ(ComposeRequestId(7, kLowMask - 2).value() & kLowMask, kLowMask - 1);
  EXPECT_EQ(ComposeRequestId(7, kLowMask - 1).value() & kLowMask, 1u);
}

TEST(RequestIdsTest, RestartedSequencesDoNotReuseIds) {
  // Two router starts with different epochs: the same counts, other ids.
  RequestIdSequence before(11), after(12);
  std::set<uint64_t> ids;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(ids.insert(before.Next().value()).second);
  }
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(ids.insert(after.Next().value()).second);
  }
}

TEST(RequestIdsTest, SequenceIsUniqueAcrossThreads) {
  RequestIdSequence seq(3);
  std::vector<std::vector<uint64_t>> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got) {
    threads.emplace_back([&seq, &g] {
      for (int i = 0; i < 1000; ++i) g.push_back(seq.Next().value());
    });
  }
  for (auto& t : threads) t.join();
  std::set<uint64_t> all;
  for (const auto& g : got) all.insert(g.begin(), g.end());
  EXPECT_EQ(all.size(), 4000u);
  EXPECT_EQ(*all.begin(), ComposeRequestId(3, 0).value());
  EXPECT_EQ(*all.rbegin(), ComposeRequestId(3, 3999).value());
}

TEST(RequestIdsTest, RandomEpochsDiffer) {
  // 2^-23 per pair: 8 draws that all agree would be a broken generator.
  std::set<uint32_t> epochs;
  for (int i = 0; i < 8; ++i) {
    const uint32_t e = RandomRequestIdEpoch();
    EXPECT_LE(e, kMaxEpoch);
    epochs.insert(e);
  }
  EXPECT_GT(epochs.size(), 1u);
  EXPECT_EQ(RequestIdSequence(kMaxEpoch + 1).epoch(), 0u);  // masked
}

}  // namespace
}  // namespace kvcanary::engine
