// The KV-cache event stream follower: the decoder on both event shapes and
// on bad bytes, the subscriber on a real ZMQ stream with dropped messages,
// replay and restarts, and the per-pair decision on what the first tier's
// ledger saw. A second tier (moves, promotions, the eviction step):
// second_tier_test.cc.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/pair_decision.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/kv_events/wire.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_kv_publisher.h"
#include "tests/auditor/kv_events/pair_builder.h"

namespace kvcanary::auditor::kv_events {
namespace {

using testing::Cleared;
using testing::EncodeBatch;
using testing::FakeEvent;
using testing::FakeKvPublisher;
using testing::PairBuilder;
using testing::Removed;
using testing::Stored;

TEST(KvEventsWireTest, DecodesMapShapedEvents) {
  absl::StatusOr<Batch> b = DecodeBatch(EncodeBatch(
      {Stored({1, 2}, std::nullopt, 100), Removed({7}), Cleared()}));
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->events.size(), 3u);
  EXPECT_TRUE(b->map_events);
  EXPECT_FALSE(b->array_events);
  EXPECT_EQ(b->events[0].type, EventType::kBlockStored);
  EXPECT_EQ(
      b->events[0].block_hashes,
      (std::vector<BlockHash>{BlockHash::FromInt(1), BlockHash::FromInt(2)}));
  EXPECT_FALSE(b->events[0].parent.has_value());
  EXPECT_EQ(b->events[0].token_ids.size(), 8u);
  EXPECT_EQ(b->events[0].block_size, 4);
  EXPECT_EQ(b->events[0].medium, "GPU");
  EXPECT_EQ(b->events[1].type, EventType::kBlockRemoved);
  EXPECT_EQ(b->events[2].type, EventType::kAllBlocksCleared);
  EXPECT_EQ(b->data_parallel_rank, 0);
}

TEST(KvEventsWireTest, DecodesTaggedPositionalArraysTheSame) {
  const std::vector<FakeEvent> events = {Stored({1, 2}, 9, 100), Removed({7})};
  absl::StatusOr<Batch> arrays = DecodeBatch(EncodeBatch(events, false));
  absl::StatusOr<Batch> maps = DecodeBatch(EncodeBatch(events, true));
  ASSERT_TRUE(arrays.ok()) << arrays.status();
  ASSERT_TRUE(maps.ok()) << maps.status();
  EXPECT_TRUE(arrays->array_events);
  ASSERT_EQ(arrays->events.size(), maps->events.size());
  for (size_t i = 0; i < maps->events.size(); ++i) {
    EXPECT_EQ(arrays->events[i].block_hashes, maps->events[i].block_hashes);
    EXPECT_EQ(arrays->events[i].parent, maps->events[i].parent);
    EXPECT_EQ(arrays->events[i].token_ids, maps->events[i].token_ids);
  }
}

TEST(KvEventsWireTest, AMapShapedBatchDecodesLikeAPositionalOne) {
  // One vLLM revision declares the batch without array_like: {ts, events,
  // data_parallel_rank} as a map.
  const std::string positional = EncodeBatch({Stored({1, 2}, 9, 100)});
  absl::StatusOr<Batch> a = DecodeBatch(positional);
  ASSERT_TRUE(a.ok()) << a.status();
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_map(3);
  pk.pack(std::string("ts"));
  pk.pack_double(1.7e9);
  pk.pack(std::string("events"));
  // The events array of the positional encoding, copied as it is.
  msgpack::object_handle h =
      msgpack::unpack(positional.data(), positional.size());
  pk.pack(h.get().via.array.ptr[1]);
  pk.pack(std::string("data_parallel_rank"));
  pk.pack(2);
  absl::StatusOr<Batch> m = DecodeBatch(std::string(buf.data(), buf.size()));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->data_parallel_rank, 2);
  ASSERT_EQ(m->events.size(), 1u);
  EXPECT_EQ(m->events[0].block_hashes, a->events[0].block_hashes);
  EXPECT_EQ(m->events[0].token_ids, a->events[0].token_ids);
}

TEST(KvEventsWireTest, BytesAndIntegerHashesNeverCompareEqual) {
  absl::StatusOr<Batch> ints = DecodeBatch(EncodeBatch({Stored({5}, {}, 0)}));
  absl::StatusOr<Batch> bytes =
      DecodeBatch(EncodeBatch({Stored({5}, {}, 0)}, true, true));
  ASSERT_TRUE(ints.ok() && bytes.ok());
  EXPECT_NE(ints->events[0].block_hashes[0], bytes->events[0].block_hashes[0]);
  EXPECT_EQ(bytes->events[0].block_hashes[0].Hex().size(), 64u);
  EXPECT_EQ(ints->events[0].block_hashes[0].Hex(), "0x0000000000000005");
}

TEST(KvEventsWireTest, UnknownEventTagsAreCountedNotFatal) {
  FakeEvent future;
  future.type = "BlockPromoted";
  absl::StatusOr<Batch> b =
      DecodeBatch(EncodeBatch({future, Stored({1}, {}, 0)}));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->unknown_events, 1);
  EXPECT_EQ(b->events.size(), 1u);
}

TEST(KvEventsWireTest, BadBytesAreInvalidArgumentNamingWhy) {
  const std::string good = EncodeBatch({Stored({1}, {}, 0)});
  for (const std::string& bad :
       {std::string(), std::string("\xc1"), good.substr(0, good.size() - 3),
        good + "x", std::string("\x92\xa1x\x90"),  // ts a string
        std::string("\x81\xa1x\x01")}) {           // a map, not a batch
    absl::StatusOr<Batch> b = DecodeBatch(bad);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument)
        << b.status();
  }
  // A BlockStored whose block_hashes is a string.
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pk.pack_array(2);
  pk.pack_double(1);
  pk.pack_array(1);
  pk.pack_map(2);
  pk.pack(std::string("type"));
  pk.pack(std::string("BlockStored"));
  pk.pack(std::string("block_hashes"));
  pk.pack(std::string("nope"));
  absl::StatusOr<Batch> b = DecodeBatch(std::string(buf.data(), buf.size()));
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("block_hashes is a str"),
            std::string::npos)
      << b.status();
}

TEST(KvEventsWireTest, SequenceFramesAreEightBytesBigEndianSigned) {
  EXPECT_EQ(EncodeSequence(258), std::string("\0\0\0\0\0\0\x01\x02", 8));
  EXPECT_EQ(DecodeSequence(EncodeSequence(-1)).value(), -1);
  EXPECT_FALSE(DecodeSequence("1234").ok());
}

TEST(KvEventsFlagTest, ParsesEndpointReplayAndTopic) {
  absl::StatusOr<SubscriberOptions> o =
      ParseKvEventsFlag("tcp://h:1,replay=tcp://h:2,topic=kv");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoint, "tcp://h:1");
  EXPECT_EQ(o->replay_endpoint, "tcp://h:2");
  EXPECT_EQ(o->topic, "kv");
  EXPECT_FALSE(o->report_full);
  EXPECT_TRUE(ParseKvEventsFlag("tcp://h:1,report=full")->report_full);
  EXPECT_EQ(ParseKvEventsFlag("tcp://h:1,pairs=7")->pairs, 7);
  EXPECT_FALSE(ParseKvEventsFlag("tcp://h:1,pairs=0").ok());
  EXPECT_FALSE(ParseKvEventsFlag("h:1").ok());
  EXPECT_FALSE(ParseKvEventsFlag("tcp://h:1,bogus=1").ok());
}

// Waits until the ledger has ingested `n` messages (or 5 s).
bool WaitMessages(const Ledger& ledger, int64_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (absl::Now() < deadline) {
    if (ledger.stats().messages + ledger.stats().undecodable >= n) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

class KvEventsSubscriberTest : public ::testing::Test {
 protected:
  void Follow(FakeKvPublisher& pub) {
    absl::StatusOr<SubscriberOptions> o = ParseKvEventsFlag(pub.flag());
    ASSERT_TRUE(o.ok()) << o.status();
    sub_ = std::make_unique<Subscriber>(*o, &ledger_);
    ASSERT_TRUE(sub_->Start().ok());
  }
  Ledger ledger_;
  std::unique_ptr<Subscriber> sub_;
};

TEST_F(KvEventsSubscriberTest, FollowsAStreamInOrderAndKeepsOnlyHashes) {
  FakeKvPublisher pub;
  Follow(pub);
  const Mark start = ledger_.Now();
  pub.Publish(EncodeBatch({Stored({1, 2}, {}, 10)}));
  pub.Publish(EncodeBatch({Removed({1})}));
  ASSERT_TRUE(WaitMessages(ledger_, 2));
  const Span s = ledger_.Since(start);
  EXPECT_TRUE(s.whole());
  ASSERT_EQ(s.entries.size(), 3u);
  EXPECT_EQ(s.entries[1].parent, BlockHash::FromInt(1));
  EXPECT_NE(s.entries[0].token_digest, 0u);
  EXPECT_NE(s.entries[0].token_digest, s.entries[1].token_digest);
  EXPECT_EQ(s.entries[2].type, EventType::kBlockRemoved);
  EXPECT_EQ(ledger_.stats().stored_blocks, 2);
}

TEST_F(KvEventsSubscriberTest, ADroppedMessageIsReplayedAndTheSpanIsWhole) {
  FakeKvPublisher pub;
  Follow(pub);
  const Mark start = ledger_.Now();
  pub.Publish(EncodeBatch({Stored({1}, {}, 10)}));
  pub.Publish(EncodeBatch({Stored({2}, 1, 20)}), /*drop=*/true);
  pub.Publish(EncodeBatch({Stored({3}, 2, 30)}));
  ASSERT_TRUE(WaitMessages(ledger_, 3));
  const Span s = ledger_.Since(start);
  EXPECT_TRUE(s.whole());
  ASSERT_EQ(s.entries.size(), 3u);
  EXPECT_EQ(s.entries[1].hash, BlockHash::FromInt(2));  // in sequence order
  EXPECT_EQ(ledger_.stats().gaps_recovered, 1);
  EXPECT_EQ(ledger_.stats().replayed_messages, 1);
}

TEST_F(KvEventsSubscriberTest, AGapReplayCannotFillLeavesTheSpanNotWhole) {
  FakeKvPublisher pub;
  Follow(pub);
  const Mark start = ledger_.Now();
  pub.Publish(EncodeBatch({Stored({1}, {}, 10)}));
  pub.Publish(EncodeBatch({Stored({2}, 1, 20)}), true, /*forget=*/true);
  pub.Publish(EncodeBatch({Stored({3}, 2, 30)}));
  ASSERT_TRUE(WaitMessages(ledger_, 2));
  const Span s = ledger_.Since(start);
  EXPECT_FALSE(s.whole());
  ASSERT_EQ(s.breaks.size(), 1u);
  EXPECT_EQ(s.breaks[0].from_seq, 1);
  EXPECT_FALSE(s.breaks[0].recovered);
  EXPECT_EQ(ledger_.stats().missing_messages, 1);
}

TEST(KvEventsSubscriberNoReplayTest, AGapWithoutAReplaySocketIsMissing) {
  FakeKvPublisher pub(/*replay=*/false);
  Ledger ledger;
  Subscriber sub(*ParseKvEventsFlag(pub.flag()), &ledger);
  ASSERT_TRUE(sub.Start().ok());
  pub.Publish(EncodeBatch({Stored({1}, {}, 10)}));
  pub.Publish(EncodeBatch({Stored({2}, 1, 20)}), true);
  pub.Publish(EncodeBatch({Stored({3}, 2, 30)}));
  ASSERT_TRUE(WaitMessages(ledger, 2));
  EXPECT_EQ(ledger.stats().gaps, 1);
  EXPECT_EQ(ledger.stats().gaps_recovered, 0);
}

TEST_F(KvEventsSubscriberTest, APublisherRestartIsABreak) {
  FakeKvPublisher pub;
  Follow(pub);
  pub.Publish(EncodeBatch({Stored({1}, {}, 10)}));
  pub.Publish(EncodeBatch({Stored({2}, 1, 20)}));
  ASSERT_TRUE(WaitMessages(ledger_, 2));
  const Mark before = ledger_.Now();
  pub.Restart();
  pub.Publish(EncodeBatch({Stored({5}, {}, 50)}));
  ASSERT_TRUE(WaitMessages(ledger_, 3));
  const Span s = ledger_.Since(before);
  EXPECT_FALSE(s.whole());
  ASSERT_EQ(s.breaks.size(), 1u);
  EXPECT_EQ(s.breaks[0].kind, Break::kRestart);
  EXPECT_EQ(ledger_.Now().epoch, before.epoch + 1);
  EXPECT_EQ(ledger_.stats().restarts, 1);
}

TEST_F(KvEventsSubscriberTest, AnUndecodableMessageIsABreakNotACrash) {
  FakeKvPublisher pub;
  Follow(pub);
  const Mark start = ledger_.Now();
  pub.SendRaw({"", EncodeSequence(0), "\xc1garbage"});
  pub.SendRaw({"only one frame"});
  ASSERT_TRUE(WaitMessages(ledger_, 2));
  EXPECT_FALSE(ledger_.Since(start).whole());
  EXPECT_EQ(ledger_.stats().undecodable, 2);
}

TEST(KvEventsSubscriberStartTest, NoPublisherIsUnavailable) {
  Ledger ledger;
  SubscriberOptions o;
  o.endpoint = "tcp://127.0.0.1:1";
  o.connect_timeout = absl::Milliseconds(300);
  Subscriber sub(o, &ledger);
  EXPECT_EQ(sub.Start().code(), absl::StatusCode::kUnavailable);
}

// --- DecidePair ------------------------------------------------------------

TEST(KvEventsDecidePairTest, BStoringTheSameTokensUnderOtherHashesIsIsolated) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  // B's copies of A's three blocks, then its witness block (tokens 112-115).
  p.Probe({Stored({11, 12, 13, 14}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe());
  EXPECT_EQ(r.verdict, PairVerdict::kIsolated) << r.reason;
  EXPECT_EQ(r.isolated, 3);
}

// Over chat, A's last block holds a template's closing markers after P
// (tokens 112-115), which B's prompt does not: B stores its copies of A's
// first three, then its witness chained to them. The closing block is no
// block of A's that B could have been served: not judged, and the pair is
// isolated.
TEST(KvEventsDecidePairTest, ATemplatesClosingBlockAfterBsOwnIsNotJudged) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3, 4}, {}, 100)});
  p.Probe({Stored({11, 12, 13}, {}, 100), Stored({15}, 13, 500)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe());
  EXPECT_EQ(r.verdict, PairVerdict::kIsolated) << r.reason;
  EXPECT_EQ(r.isolated, 3);
  EXPECT_EQ(r.not_stored, 0);
  EXPECT_EQ(r.tail_blocks, 1);
  EXPECT_NE(r.reason.find("closing markers"), std::string::npos) << r.reason;
}

// A block B did not store BEFORE one it stored again is still judged: the
// pair is mixed, never isolated.
TEST(KvEventsDecidePairTest, AMissingBlockBeforeBsOwnStillMakesThePairMixed) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Probe({Stored({12}, 1, 104), Stored({13}, 12, 108), Stored({15}, 13, 500)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe());
  EXPECT_NE(r.verdict, PairVerdict::kIsolated) << r.reason;
  EXPECT_EQ(r.tail_blocks, 0);
}

TEST(KvEventsDecidePairTest, BStoringNothingForTheSameTokensIsShared) {
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  // Only B's witness block, chained to A's last: B was served A's three.
  p.Probe({Stored({31}, 3, 500)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe());
  EXPECT_EQ(r.verdict, PairVerdict::kShared) << r.reason;
  EXPECT_EQ(r.not_stored, 3);
  ASSERT_FALSE(r.blocks.empty());
  EXPECT_EQ(r.blocks[0].a_hash, BlockHash::FromInt(1));
}

TEST(KvEventsDecidePairTest, NoStoreButZeroCachedTokensReportedIsInconclusive) {
  PairBuilder p;
  p.Plant({Stored({1, 2}, {}, 100)});
  p.Probe({Stored({31}, 2, 500)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/0));
  EXPECT_EQ(r.verdict, PairVerdict::kInconclusive);
  EXPECT_NE(r.reason.find("0 cached tokens"), std::string::npos) << r.reason;
}

TEST(KvEventsDecidePairTest,
     BsRequestTheStreamDidNotSeeIsInconclusiveNotShared) {
  // Two replicas, one stream followed: B's probe went to the other one
  // (nothing stored, not even its witness), its control to this one.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Probe({});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/-1, 2, 10));
  EXPECT_EQ(r.verdict, PairVerdict::kInconclusive) << r.reason;
  EXPECT_NE(r.reason.find("replica"), std::string::npos) << r.reason;
}

TEST(KvEventsDecidePairTest, SilenceWithCachedTokensCoveringAsBlocksIsShared) {
  // An engine that caches nothing a flagged request computed (ours, after
  // a watermark violation): no witness, but B's reported cached tokens
  // cover A's three blocks of 4 tokens. Fewer would not.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Probe({});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/12));
  EXPECT_EQ(r.verdict, PairVerdict::kShared) << r.reason;
  EXPECT_FALSE(r.witness_stored);
  PairBuilder q;
  q.Plant({Stored({1, 2, 3}, {}, 100)});
  q.Probe({});
  q.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(q.Observe(/*cached=*/8)).verdict,
            PairVerdict::kInconclusive);
  // A cached template or system prompt of 8 tokens, as the control had on
  // its replica: 12 cached tokens then cover only 4 of A's 12.
  PairBuilder t;
  t.Plant({Stored({1, 2, 3}, {}, 100)});
  t.Probe({});
  t.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(t.Observe(/*cached=*/12, 10, 10, /*control_cached=*/8))
                .verdict,
            PairVerdict::kInconclusive);
}

TEST(KvEventsDecidePairTest, AStrangersBlockIsNotTakenForBsWitness) {
  // Another client's request stored a block while B's was served
  // elsewhere: its parent is none of P's blocks, so it is not B's witness.
  PairBuilder p;
  p.Plant({Stored({1, 2, 3}, {}, 100)});
  p.Probe({Stored({41, 42}, 99, 700)});
  p.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(p.Observe()).verdict, PairVerdict::kInconclusive);
}

TEST(KvEventsDecidePairTest, SameHashesWithAHitSignalAreShared) {
  // An engine that reports hits as stores: B's blocks under A's hashes,
  // and B's usage says they were cached.
  PairBuilder p;
  p.Plant({Stored({1, 2}, {}, 100)});
  p.Probe({Stored({1, 2, 31}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(p.Observe(/*cached=*/8)).verdict, PairVerdict::kShared);
}

TEST(KvEventsDecidePairTest, SameHashesWithoutAHitSignalAreNotCalledSharing) {
  // Hashes that ignore the salt while the cache is isolated (past SGLang):
  // no cached tokens, no faster first token.
  PairBuilder p;
  p.Plant({Stored({1, 2}, {}, 100)});
  p.Probe({Stored({1, 2, 31}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe(/*cached=*/0, 10, 10));
  EXPECT_EQ(r.verdict, PairVerdict::kSameHash) << r.reason;
  // The same with a first token far faster than the control's: a hit.
  PairBuilder q;
  q.Plant({Stored({1, 2}, {}, 100)});
  q.Probe({Stored({1, 2, 31}, {}, 100)});
  q.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(q.Observe(-1, 2, 10)).verdict, PairVerdict::kShared);
}

TEST(KvEventsDecidePairTest, AnUnrecoveredGapMakesThePairInconclusive) {
  PairBuilder p;
  p.Plant({Stored({1, 2}, {}, 100)});
  p.Gap();
  p.Probe({});
  p.Control({Stored({21}, {}, 900)});
  const PairResult r = DecidePair(p.Observe());
  EXPECT_EQ(r.verdict, PairVerdict::kInconclusive);
  EXPECT_NE(r.reason.find("lost"), std::string::npos) << r.reason;
}

TEST(KvEventsDecidePairTest, APublisherRestartMakesThePairInconclusive) {
  PairBuilder p;
  p.Plant({Stored({1, 2}, {}, 100)});
  p.Restart();
  p.Probe({Stored({1, 2}, {}, 100)});
  p.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(p.Observe()).verdict, PairVerdict::kInconclusive);
}

TEST(KvEventsDecidePairTest, AControlThatStoredNothingMakesSilenceMeanNothing) {
  PairBuilder p;
  p.Plant({Stored({1, 2}, {}, 100)});
  p.Probe({});
  p.Control({});
  EXPECT_EQ(DecidePair(p.Observe()).verdict, PairVerdict::kInconclusive);
}

TEST(KvEventsDecidePairTest, EvictionOfThePlantMakesThePairInconclusive) {
  PairBuilder p;
  p.Plant({Stored({1, 2}, {}, 100)});
  p.Probe({Removed({1, 2})});
  p.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(p.Observe()).verdict, PairVerdict::kInconclusive);
}

TEST(KvEventsDecidePairTest, NoPlantStoreIsInconclusive) {
  PairBuilder p;
  p.Plant({});
  p.Probe({});
  p.Control({Stored({21}, {}, 900)});
  EXPECT_EQ(DecidePair(p.Observe()).verdict, PairVerdict::kInconclusive);
}

}  // namespace
}  // namespace kvcanary::auditor::kv_events
