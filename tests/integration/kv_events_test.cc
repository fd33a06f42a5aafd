// `up --kv-events`: the prefill node's prefix cache events on a real ZMQ
// PUB, as an auditor's KV-events detector sees them. In global mode a
// second tenant's identical prompt stores nothing (it hit the first
// tenant's pages); in tenant mode it stores the same tokens under other
// hashes. Replay answers from a seq; a subscriber without the trace token
// gets nothing; a restarted prefill node publishes on the same ports from
// seq 0. Payloads are decoded with msgpack-cxx (tests/engine/).
#include <signal.h>

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/kv_events_client.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

constexpr int kPageTokens = 16;  // up's default

// "kv-events tcp://H:P replay=tcp://H:P": up's line after the trace token.
struct KvEventsLine {
  std::string endpoint, replay;
};
KvEventsLine ReadKvEventsLine(Cluster& cluster) {
  const std::string line = cluster.process().ReadLine();
  KvEventsLine out;
  out.endpoint = UrlOf(line);
  const size_t replay = line.find(" replay=");
  if (line.rfind("kv-events ", 0) == 0 && replay != std::string::npos) {
    out.replay = line.substr(replay + 8);
  }
  return out;
}

// A cluster with the event stream on, and its sockets.
struct EventCluster {
  explicit EventCluster(const std::string& mode)
      : cluster({"--prefix-cache=" + mode, "--watermark=detect",
                 "--kv-events=tcp://127.0.0.1:0"}) {
    if (cluster.ok()) line = ReadKvEventsLine(cluster);
  }
  bool ok() const {
    return cluster.ok() && !line.endpoint.empty() && !line.replay.empty();
  }
  Cluster cluster;
  KvEventsLine line;
  zmq::context_t context;
};

HttpResult Send(const Cluster& c, const std::string& prompt,
                const std::string& key) {
  return Post(c.router(), "/v1/completions", Completion(prompt, 4), key);
}

// The full pages a prompt publishes, from its answer's token count.
int FullPages(const HttpResult& r) {
  return r.json["usage"]["prompt_tokens"].get<int>() / kPageTokens;
}

// Every event of `messages` of `type`, in order.
std::vector<DecodedEvent> EventsOf(const std::vector<EventMessage>& messages,
                                   const std::string& type) {
  std::vector<DecodedEvent> out;
  for (const EventMessage& m : messages) {
    auto batch = DecodeKvEventBatch(m.payload);
    if (!batch) continue;
    for (DecodedEvent& e : batch->events) {
      if (e.type == type) out.push_back(std::move(e));
    }
  }
  return out;
}

void ExpectAChainOfPages(const DecodedEvent& e, int pages) {
  EXPECT_EQ(e.block_hashes.size(), static_cast<size_t>(pages));
  for (const std::string& h : e.block_hashes) EXPECT_EQ(h.size(), 32u);
  EXPECT_FALSE(e.parent.has_value()) << "a prompt's first page has no parent";
  EXPECT_EQ(e.token_ids.size(), static_cast<size_t>(pages * kPageTokens));
  EXPECT_EQ(e.block_size, kPageTokens);
  EXPECT_EQ(e.medium, "GPU");
}

TEST(KvEventsTest, GlobalModeASecondTenantsSamePromptStoresNothing) {
  EventCluster c("global");
  ASSERT_TRUE(c.ok()) << "kvcanary-engine up did not start";
  EventSubscriber sub(c.context, c.line.endpoint, kKvEventsUser,
                      c.cluster.trace_token());
  ASSERT_EQ(sub.WaitHandshake(), Handshake::kSucceeded);
  const std::string prompt = LongPrompt(40);
  HttpResult acme = Send(c.cluster, prompt, "sk-acme");
  ASSERT_EQ(acme.status, 200) << acme.body;
  const auto first = sub.Drain();
  HttpResult globex = Send(c.cluster, prompt, "sk-globex");
  ASSERT_EQ(globex.status, 200) << globex.body;
  EXPECT_GT(
      globex.json["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
      0)
      << "globex was served acme's pages";

  const auto stored = EventsOf(first, "BlockStored");
  ASSERT_EQ(stored.size(), 1u);
  ExpectAChainOfPages(stored[0], FullPages(acme));
  EXPECT_TRUE(EventsOf(sub.Drain(), "BlockStored").empty())
      << "globex's prompt stored pages of its own";
}

TEST(KvEventsTest, TenantModeStoresTheSameTokensUnderEachTenantsHashes) {
  EventCluster c("tenant");
  ASSERT_TRUE(c.ok()) << "kvcanary-engine up did not start";
  EventSubscriber sub(c.context, c.line.endpoint, kKvEventsUser,
                      c.cluster.trace_token());
  ASSERT_EQ(sub.WaitHandshake(), Handshake::kSucceeded);
  const std::string prompt = LongPrompt(40);
  HttpResult acme = Send(c.cluster, prompt, "sk-acme");
  ASSERT_EQ(acme.status, 200) << acme.body;
  HttpResult globex = Send(c.cluster, prompt, "sk-globex");
  ASSERT_EQ(globex.status, 200) << globex.body;
  const auto live = sub.Drain();

  const auto stored = EventsOf(live, "BlockStored");
  ASSERT_EQ(stored.size(), 2u);
  ExpectAChainOfPages(stored[0], FullPages(acme));
  ExpectAChainOfPages(stored[1], FullPages(globex));
  EXPECT_EQ(stored[0].token_ids, stored[1].token_ids);
  const std::set<std::string> acme_hashes(stored[0].block_hashes.begin(),
                                          stored[0].block_hashes.end());
  for (const std::string& h : stored[1].block_hashes) {
    EXPECT_EQ(acme_hashes.count(h), 0u) << "a hash shared across tenants";
  }

  // Replay from the first seq gives the same batches, byte for byte; from
  // the last one, only that one.
  ASSERT_FALSE(live.empty());
  const auto replayed = Replay(c.context, c.line.replay, kKvEventsUser,
                               c.cluster.trace_token(), live.front().seq);
  ASSERT_EQ(replayed.size(), live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    EXPECT_EQ(replayed[i].seq, live[i].seq);
    EXPECT_EQ(replayed[i].payload, live[i].payload);
  }
  const auto last = Replay(c.context, c.line.replay, kKvEventsUser,
                           c.cluster.trace_token(), live.back().seq);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].seq, live.back().seq);
}

TEST(KvEventsTest, ASubscriberWithoutTheTraceTokenGetsNothing) {
  EventCluster c("tenant");
  ASSERT_TRUE(c.ok()) << "kvcanary-engine up did not start";
  EventSubscriber good(c.context, c.line.endpoint, kKvEventsUser,
                       c.cluster.trace_token());
  EventSubscriber wrong(c.context, c.line.endpoint, kKvEventsUser,
                        c.cluster.internal_secret());  // not the token
  EventSubscriber anonymous(c.context, c.line.endpoint, "", "");
  ASSERT_EQ(good.WaitHandshake(), Handshake::kSucceeded);
  EXPECT_EQ(wrong.WaitHandshake(), Handshake::kFailedAuth);
  EXPECT_EQ(anonymous.WaitHandshake(), Handshake::kFailedProtocol);
  HttpResult r = Send(c.cluster, LongPrompt(40), "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(good.Drain().empty());
  EXPECT_FALSE(wrong.Receive(200).has_value());
  EXPECT_FALSE(anonymous.Receive(10).has_value());

  // Nor does the replay socket answer one.
  zmq::socket_t dealer(c.context, zmq::socket_type::dealer);
  SetCredentials(dealer, kKvEventsUser, c.cluster.internal_secret());
  dealer.connect(c.line.replay);
  const std::string start = SeqFrame(0);
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start), zmq::send_flags::dontwait);
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  EXPECT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(500)), 0);
}

TEST(KvEventsTest, ARestartedPrefillNodePublishesOnTheSamePortsFromSeqZero) {
  EventCluster c("tenant");
  ASSERT_TRUE(c.ok()) << "kvcanary-engine up did not start";
  ASSERT_EQ(Send(c.cluster, LongPrompt(40), "sk-acme").status, 200);
  const auto pids = RolePids(c.cluster);
  ASSERT_EQ(pids.count("prefill"), 1u);
  ASSERT_EQ(kill(static_cast<pid_t>(pids.at("prefill")), SIGKILL), 0);
  std::string line;
  do {
    line = c.cluster.process().ReadLine(30000);
  } while (!line.empty() && line.rfind("restarted role=prefill", 0) != 0);
  ASSERT_FALSE(line.empty()) << "the prefill node was not restarted";

  // The new process's first batch is seq 0, on the replay port up named.
  HttpResult r = Send(c.cluster, "one day " + LongPrompt(40), "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<EventMessage> replayed;
  for (int tries = 0; tries < 50 && replayed.empty(); ++tries) {
    replayed = Replay(c.context, c.line.replay, kKvEventsUser,
                      c.cluster.trace_token(), 0);
  }
  ASSERT_FALSE(replayed.empty());
  EXPECT_EQ(replayed[0].seq, 0);
  EXPECT_EQ(EventsOf(replayed, "BlockStored").size(), 1u);
  // And a subscriber on the PUB port up named hears it.
  EventSubscriber sub(c.context, c.line.endpoint, kKvEventsUser,
                      c.cluster.trace_token());
  ASSERT_EQ(sub.WaitHandshake(), Handshake::kSucceeded);
  ASSERT_EQ(Send(c.cluster, "the cat " + LongPrompt(40), "sk-acme").status,
            200);
  EXPECT_EQ(EventsOf(sub.Drain(), "BlockStored").size(), 1u);
}

TEST(KvEventsTest, UpRefusesKvEventsWithoutThePrefixCache) {
  Process up({"up", "--port=0", "--tenants=" + WriteTenantsFile(),
              "--prefix-cache=off", "--kv-events=tcp://127.0.0.1:0"});
  EXPECT_EQ(up.Wait(), 1);
}

}  // namespace
}  // namespace kvcanary::testing
