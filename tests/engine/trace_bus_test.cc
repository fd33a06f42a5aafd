#include "engine/core/trace_bus.h"

#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

TraceEvent Alloc(uint32_t page) {
  TraceEvent e;
  e.type = TraceEventType::kPageAlloc;
  e.page = PageId(page);
  e.gen = PageGeneration(1);
  e.tenant = TenantId(1);
  e.request = RequestId(7);
  return e;
}

std::vector<TraceEvent> DecodeAll(const std::vector<std::string>& lines) {
  std::vector<TraceEvent> out;
  for (const auto& l : lines) {
    auto e = DecodeTraceLine(l);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) out.push_back(*e);
  }
  return out;
}

TEST(TraceBusTest, ReadersGetEveryEventInOrderWithNodeAndSeq) {
  TraceBus bus(TraceNode::kDecode, 100, 1);
  auto reader = bus.Subscribe();
  for (uint32_t p = 0; p < 5; ++p) bus.Emit(Alloc(p));
  auto events = DecodeAll(reader->Wait(absl::Seconds(1)));
  ASSERT_EQ(events.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(events[i].page, PageId(i));
    EXPECT_EQ(events[i].node, TraceNode::kDecode);
    if (i > 0) {
      EXPECT_EQ(events[i].seq, events[i - 1].seq + 1);
    }
  }
}

TEST(TraceBusTest, ASlowReaderLosesEventsWithAVisibleCount) {
  TraceBus bus(TraceNode::kPrefill, 4, 1);
  auto reader = bus.Subscribe();
  for (uint32_t p = 0; p < 10; ++p) bus.Emit(Alloc(p));  // never blocks
  auto first = DecodeAll(reader->Wait(absl::Seconds(1)));
  ASSERT_EQ(first.size(), 4u);
  bus.Emit(Alloc(100));
  auto next = DecodeAll(reader->Wait(absl::Seconds(1)));
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].type, TraceEventType::kDropped);
  EXPECT_EQ(next[0].count, 6u);
  EXPECT_EQ(next[0].seq, first.back().seq + 6);  // the last event lost
  EXPECT_EQ(next[1].page, PageId(100));
  EXPECT_EQ(reader->dropped_total(), 6u);
}

TEST(TraceBusTest, ReadersAreIndependentAndCanLeave) {
  TraceBus bus(TraceNode::kDecode, 100, 1);
  auto a = bus.Subscribe();
  auto b = bus.Subscribe();
  bus.Emit(Alloc(1));
  bus.Unsubscribe(b);
  bus.Emit(Alloc(2));
  EXPECT_EQ(a->Wait(absl::Seconds(1)).size(), 2u);
  EXPECT_EQ(b->Wait(absl::Milliseconds(10)).size(), 1u);
}

TEST(TraceBusTest, ReadSamplingIsByRequestId) {
  TraceBus every_third(TraceNode::kDecode, 10, 3);
  EXPECT_TRUE(every_third.SampleReads(RequestId(3)));
  EXPECT_FALSE(every_third.SampleReads(RequestId(4)));
  TraceBus none(TraceNode::kDecode, 10, 0);
  EXPECT_FALSE(none.SampleReads(RequestId(3)));
}

}  // namespace
}  // namespace kvcanary::engine
