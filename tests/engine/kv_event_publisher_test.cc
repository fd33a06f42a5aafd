// The KV event publisher against real ZeroMQ clients on loopback: numbered
// batches to an authenticated SUB, nothing to one without the password,
// replay from a seq, a full queue dropping and counting.
#include "engine/kv_events/kv_event_publisher.h"

#include <regex>
#include <thread>

#include "gtest/gtest.h"
#include "tests/engine/kv_events_client.h"

namespace kvcanary::engine {
namespace {

using testing::DecodeKvEventBatch;
using testing::EventMessage;
using testing::EventSubscriber;
using testing::Handshake;
using testing::kKvEventsUser;
using testing::Replay;

const std::string& Token() {
  static const std::string* token = new std::string(
      "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  return *token;
}

KvEventPublisherOptions Options() {
  KvEventPublisherOptions o;
  o.endpoint = "tcp://127.0.0.1:0";
  o.replay_endpoint = "tcp://127.0.0.1:0";
  o.topic = "kv";
  o.password = SharedSecret::FromString(Token());
  return o;
}

// A batch of `events` stores, page `i`'s key filled with byte `i`.
KvEventBatch Batch(uint8_t i, int events = 1) {
  KvEventBatch b;
  b.time = absl::Now();
  for (int e = 0; e < events; ++e) {
    KvCacheEvent ev;
    ev.block_hashes.resize(1);
    ev.block_hashes[0].fill(i);
    ev.token_ids.assign(16, i);
    b.events.push_back(ev);
  }
  return b;
}

// The first byte of the first key of a message's first event.
int KeyByte(const EventMessage& m) {
  const auto batch = DecodeKvEventBatch(m.payload);
  if (!batch || batch->events.empty() ||
      batch->events[0].block_hashes.empty()) {
    return -1;
  }
  return static_cast<uint8_t>(batch->events[0].block_hashes[0][0]);
}

// Publishes until `sub` gets a message (a SUB misses what is sent before
// its subscription reaches the PUB); returns it.
std::optional<EventMessage> FirstReceived(KvEventPublisher& pub,
                                          EventSubscriber& sub) {
  for (int i = 0; i < 200; ++i) {
    pub.Publish(Batch(0xee));
    if (auto m = sub.Receive(25)) return m;
  }
  return std::nullopt;
}

TEST(KvEventPublisherTest, BindsAnyFreePortAndNamesIt) {
  KvEventPublisher pub(Options());
  ASSERT_TRUE(pub.Start().ok());
  const std::regex bound(R"(tcp://127\.0\.0\.1:[1-9][0-9]*)");
  EXPECT_TRUE(std::regex_match(pub.endpoint(), bound)) << pub.endpoint();
  EXPECT_TRUE(std::regex_match(pub.replay_endpoint(), bound));
  EXPECT_NE(pub.endpoint(), pub.replay_endpoint());
}

TEST(KvEventPublisherTest, AuthenticatedSubscriberGetsNumberedBatches) {
  KvEventPublisher pub(Options());
  ASSERT_TRUE(pub.Start().ok());
  zmq::context_t context;
  EventSubscriber sub(context, pub.endpoint(), kKvEventsUser, Token());
  const auto first = FirstReceived(pub, sub);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->topic, "kv");
  for (uint8_t i = 1; i <= 3; ++i) pub.Publish(Batch(i));
  int64_t last = first->seq;
  for (uint8_t i = 1; i <= 3;) {
    auto m = sub.Receive(2000);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->seq, last + 1);
    last = m->seq;
    if (KeyByte(*m) == 0xee) continue;  // a late probe of FirstReceived
    EXPECT_EQ(KeyByte(*m), i);
    ++i;
  }
}

TEST(KvEventPublisherTest, NoPasswordOrAWrongOneGetsNothing) {
  KvEventPublisher pub(Options());
  ASSERT_TRUE(pub.Start().ok());
  zmq::context_t context;
  EventSubscriber good(context, pub.endpoint(), kKvEventsUser, Token());
  EventSubscriber wrong(context, pub.endpoint(), kKvEventsUser,
                        std::string(64, 'f'));
  EventSubscriber other_user(context, pub.endpoint(), "admin", Token());
  EventSubscriber anonymous(context, pub.endpoint(), "", "");
  EXPECT_EQ(wrong.WaitHandshake(), Handshake::kFailedAuth);
  EXPECT_EQ(other_user.WaitHandshake(), Handshake::kFailedAuth);
  EXPECT_EQ(anonymous.WaitHandshake(), Handshake::kFailedProtocol);
  ASSERT_TRUE(FirstReceived(pub, good).has_value());
  for (uint8_t i = 0; i < 5; ++i) pub.Publish(Batch(i));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(good.Receive(2000).has_value());
  EXPECT_FALSE(wrong.Receive(300).has_value());
  EXPECT_FALSE(other_user.Receive(10).has_value());
  EXPECT_FALSE(anonymous.Receive(10).has_value());
  EXPECT_GE(pub.refused_handshakes(), 2u);
}

TEST(KvEventPublisherTest, ReplayAnswersFromASeqThenTheEndMarker) {
  KvEventPublisher pub(Options());
  ASSERT_TRUE(pub.Start().ok());
  for (uint8_t i = 0; i < 5; ++i) pub.Publish(Batch(i));
  zmq::context_t context;
  std::vector<EventMessage> all;
  for (int tries = 0; tries < 50 && all.size() < 5; ++tries) {
    all = Replay(context, pub.replay_endpoint(), kKvEventsUser, Token(), 0);
  }
  ASSERT_EQ(all.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(all[i].seq, i);  // every process starts at 0
    EXPECT_EQ(all[i].topic, "kv");
    EXPECT_EQ(KeyByte(all[i]), i);
  }
  const auto tail =
      Replay(context, pub.replay_endpoint(), kKvEventsUser, Token(), 3);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].seq, 3);
  EXPECT_EQ(tail[0].payload, all[3].payload);
  EXPECT_TRUE(Replay(context, pub.replay_endpoint(), kKvEventsUser, Token(), 5)
                  .empty());
  // A DEALER without the delimiter frame gets the same, without it.
  const auto bare = Replay(context, pub.replay_endpoint(), kKvEventsUser,
                           Token(), 4, /*delimited=*/false);
  ASSERT_EQ(bare.size(), 1u);
  EXPECT_EQ(bare[0].seq, 4);
}

TEST(KvEventPublisherTest, ReplayKeepsTheLastBufferBatches) {
  KvEventPublisherOptions o = Options();
  o.buffer_batches = 3;
  KvEventPublisher pub(o);
  ASSERT_TRUE(pub.Start().ok());
  for (uint8_t i = 0; i < 5; ++i) pub.Publish(Batch(i));
  zmq::context_t context;
  std::vector<EventMessage> kept;
  for (int tries = 0; tries < 50; ++tries) {
    kept = Replay(context, pub.replay_endpoint(), kKvEventsUser, Token(), 0);
    if (!kept.empty() && kept.back().seq == 4) break;
  }
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].seq, 2);
  EXPECT_EQ(kept[2].seq, 4);
}

TEST(KvEventPublisherTest, ReplayWithAWrongPasswordIsNotAnswered) {
  KvEventPublisher pub(Options());
  ASSERT_TRUE(pub.Start().ok());
  pub.Publish(Batch(1));
  zmq::context_t context;
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  testing::SetCredentials(dealer, kKvEventsUser, std::string(64, 'f'));
  dealer.connect(pub.replay_endpoint());
  const std::string start = testing::SeqFrame(0);
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start), zmq::send_flags::dontwait);
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(500)), 0);
}

TEST(KvEventPublisherTest, AFullQueueDropsBatchesAndCountsTheirEvents) {
  KvEventPublisherOptions o = Options();
  o.max_queue_batches = 2;
  KvEventPublisher pub(o);  // not started: nothing drains the queue
  for (uint8_t i = 0; i < 4; ++i) pub.Publish(Batch(i, /*events=*/3));
  EXPECT_EQ(pub.dropped_events(), 6u);
}

TEST(KvEventPublisherTest, StartRefusesBadConfigurations) {
  KvEventPublisherOptions o = Options();
  o.password = SharedSecret();
  EXPECT_EQ(KvEventPublisher(o).Start().code(),
            absl::StatusCode::kFailedPrecondition);
  o = Options();
  o.endpoint = "http://127.0.0.1:5557";
  EXPECT_EQ(KvEventPublisher(o).Start().code(),
            absl::StatusCode::kInvalidArgument);
  KvEventPublisher first(Options());
  ASSERT_TRUE(first.Start().ok());
  o = Options();
  o.endpoint = first.endpoint();  // taken
  EXPECT_EQ(KvEventPublisher(o).Start().code(), absl::StatusCode::kUnavailable);
}

TEST(TcpEndpointTest, ParsesHostAndPort) {
  auto e = ParseTcpEndpoint("tcp://127.0.0.1:5557");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 5557);
  EXPECT_EQ(e->BindAddress(), "tcp://127.0.0.1:5557");
  EXPECT_EQ(ParseTcpEndpoint("tcp://localhost:0")->BindAddress(),
            "tcp://localhost:*");
  for (const char* bad :
       {"127.0.0.1:5557", "tcp://127.0.0.1", "tcp://:5557", "tcp://h:70000",
        "tcp://h:-1", "tcp://h:x", "ipc:///tmp/kv"}) {
    EXPECT_EQ(ParseTcpEndpoint(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace kvcanary::engine
