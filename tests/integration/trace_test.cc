// The trace stream of real nodes: GET /v1/trace, decoded with the shared
// format, tells the story of a request and of a leak.
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/page_stamp.h"
#include "common/trace_event.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

TEST(TraceTest, ARequestsLifeOnTheDecodeNode) {
  Cluster cluster({});
  ASSERT_TRUE(cluster.ok());
  TraceTap tap(cluster.decode(), cluster.trace_token());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion("a cat sat", 6), "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto events = tap.Stop();
  int allocs = 0, frees = 0, writes = 0, reads = 0, commits = 0, violations = 0;
  bool finished = false;
  for (const TraceEvent& e : events) {
    EXPECT_EQ(e.node, TraceNode::kDecode);
    allocs += e.type == TraceEventType::kPageAlloc;
    frees += e.type == TraceEventType::kPageFree;
    writes += e.type == TraceEventType::kPageWrite;
    reads += e.type == TraceEventType::kPageRead;
    commits += e.type == TraceEventType::kTransferCommit && e.ok;
    violations += e.type == TraceEventType::kViolation;
    finished |= e.type == TraceEventType::kRequest &&
                e.phase == TracePhase::kFinished && e.tenant == TenantId(1);
  }
  EXPECT_GT(allocs, 0);
  EXPECT_EQ(allocs, frees);
  EXPECT_GT(writes, 0);
  EXPECT_GT(reads, 0);
  EXPECT_EQ(commits, 1);
  EXPECT_EQ(violations, 0);
  EXPECT_TRUE(finished);
}

TEST(TraceTest, TheIncidentShowsAsViolationsAttributedToTheWriter) {
  Cluster cluster(
      {"--fault=admission-abort-lost", "--watermark=detect", "--num_pages=64"});
  ASSERT_TRUE(cluster.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Post(cluster.router(), "/v1/completions",
                   Completion(LongPrompt(60) + " " + std::to_string(i), 8),
                   "sk-globex")
                  .status,
              200);
  }
  TraceTap tap(cluster.decode(), cluster.trace_token());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion(LongPrompt(150), 8), "sk-acme");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto events = tap.Stop();
  int foreign = 0;
  bool short_commit = false;
  for (const TraceEvent& e : events) {
    if (e.type == TraceEventType::kViolation &&
        e.kind == ViolationKind::kForeignTenantRead) {
      ++foreign;
      EXPECT_EQ(e.reader.tenant, TenantId(1));  // acme read...
      EXPECT_EQ(e.writer.tenant, TenantId(2));  // ...globex's bytes
      EXPECT_EQ(e.owner.tenant, TenantId(1));   // in pages acme owned
    }
    if (e.type == TraceEventType::kTransferCommit) {
      short_commit = !e.ok && e.pages_sent < e.pages_expected;
    }
  }
  EXPECT_GT(foreign, 0);
  EXPECT_TRUE(short_commit)
      << "the one-page transfer shows in the commit event";
}

// kvt2: a prefix computed by acme's first request, cached on the prefill
// node and shipped to decode for the second, stays that request's in every
// stamp and event, and is marked shared by page_share, not by a made-up
// writer request.
TEST(TraceTest, ASharedPrefixKeepsItsRealWriterOnBothNodes) {
  Cluster cluster({"--watermark=detect"});
  ASSERT_TRUE(cluster.ok());
  TraceTap prefill_tap(cluster.prefill(), cluster.trace_token());
  TraceTap decode_tap(cluster.decode(), cluster.trace_token());
  const std::string prompt = LongPrompt(40);  // several full pages
  HttpResult first = Post(cluster.router(), "/v1/completions",
                          Completion(prompt + " cat", 4), "sk-acme");
  HttpResult second = Post(cluster.router(), "/v1/completions",
                           Completion(prompt + " sun", 4), "sk-acme");
  const auto prefill_events = prefill_tap.Stop();
  const auto decode_events = decode_tap.Stop();
  ASSERT_EQ(first.status, 200) << first.body;
  ASSERT_EQ(second.status, 200) << second.body;
  const RequestId first_id(
      std::stoull(first.json["id"].get<std::string>().substr(5)));
  // The prefill node published the first request's pages.
  int prefill_shares = 0;
  for (const TraceEvent& e : prefill_events) {
    EXPECT_EQ(e.version, kTraceVersion2);
    if (e.type != TraceEventType::kPageShare) continue;
    ++prefill_shares;
    EXPECT_EQ(e.request, first_id);
    EXPECT_EQ(e.tenant, TenantId(1));
  }
  EXPECT_GT(prefill_shares, 0);
  // The decode node installed them for the second request as the first
  // request's bytes, shared; nobody's read of them is a violation.
  int decode_shares = 0;
  for (const TraceEvent& e : decode_events) {
    EXPECT_NE(e.request, kReservedRequestId);
    EXPECT_NE(e.type, TraceEventType::kViolation) << e.DebugString();
    if (e.type != TraceEventType::kPageShare) continue;
    ++decode_shares;
    EXPECT_EQ(e.request, first_id);
  }
  EXPECT_GT(decode_shares, 0);
}

TEST(TraceTest, ANodeCanAlsoWriteItsTraceToAFile) {
  const std::string path = ::testing::TempDir() + "/kvcanary-trace-" +
                           std::to_string(getpid()) + ".log";
  std::remove(path.c_str());
  const std::string tenants = WriteTenantsFile();
  auto ready_url = [](Process& p) {
    const std::string line = p.ReadLine();
    const size_t at = line.find("http=");
    return at == std::string::npos
               ? std::string()
               : "http://127.0.0.1:" +
                     std::to_string(std::stoi(line.substr(at + 5)));
  };
  const std::string secret = "--internal_secret_file=" + WriteSecretFile();
  const int kv = FreePort();
  Process prefill({"serve", "--role=prefill", secret,
                   "--decode_kv=decode-0=127.0.0.1:" + std::to_string(kv)});
  const std::string prefill_url = ready_url(prefill);
  auto decode = std::make_unique<Process>(std::vector<std::string>{
      "serve", "--role=decode", secret, "--trace_file=" + path,
      "--prefill=" + prefill_url, "--kv_port=" + std::to_string(kv)});
  const std::string decode_url = ready_url(*decode);
  Process router({"serve", "--role=router", "--tenants=" + tenants, secret,
                  "--prefill=" + prefill_url, "--decode=" + decode_url});
  const std::string router_url = ready_url(router);
  ASSERT_FALSE(router_url.empty());
  ASSERT_EQ(Post(router_url, "/v1/completions", Completion("to the file", 4),
                 "sk-acme")
                .status,
            200);
  decode.reset();  // SIGTERM: the node writes out its trace and exits
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  TraceLineReader reader;
  reader.Feed(text.str());
  int events = 0;
  bool finished = false;
  while (true) {
    auto e = reader.Next();
    ASSERT_TRUE(e.ok()) << e.status();
    if (!e->has_value()) break;
    ++events;
    finished |= (*e)->type == TraceEventType::kRequest &&
                (*e)->phase == TracePhase::kFinished;
  }
  EXPECT_TRUE(reader.Finish().ok());
  EXPECT_GT(events, 5);
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace kvcanary::testing
