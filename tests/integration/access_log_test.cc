// The router's access log on the real cluster (`up --access-log`): one line
// per completion request, with what the nodes reported, never the text; the
// admission-abort-lost incident's signature in it; rotation by size.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

constexpr int kOverLongWords = 150;  // past the prefill tier's 256, within 512
constexpr int kMaxPromptTokens = 256;
// A word in every prompt that must never reach the log.
constexpr char kSecret[] = "zanzibar";

std::string LogPath(const std::string& name) {
  static int counter = 0;
  const std::string path = ::testing::TempDir() + "/kvcanary-access-" +
                           std::to_string(getpid()) + "-" +
                           std::to_string(counter++) + "-" + name;
  unlink(path.c_str());
  for (int i = 1; i < 5; ++i) unlink((path + "." + std::to_string(i)).c_str());
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<json> Lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    out.push_back(json::parse(line, nullptr, false));
    EXPECT_TRUE(out.back().is_object()) << line;
  }
  return out;
}

// The log once it has `n` lines (a stream's line lands just after its
// last chunk), or as it is after 10 s.
std::vector<json> WaitForLines(const std::string& path, size_t n) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<json> lines = Lines(path);
  while (lines.size() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    lines = Lines(path);
  }
  return lines;
}

std::string OverLong() {
  return std::string(kSecret) + " " + LongPrompt(kOverLongWords);
}
std::string Normal(int i) {
  return std::string(kSecret) + " the little dog " + std::to_string(i);
}

struct Sent {
  std::vector<HttpResult> over_long, normal;
};

// N over-long and M normal requests from acme, and one with a bad key.
Sent SendMix(const Cluster& c, int n, int m) {
  Sent s;
  for (int i = 0; i < n; ++i) {
    s.over_long.push_back(Post(c.router(), "/v1/completions",
                               Completion(OverLong(), 4), "sk-acme"));
  }
  for (int i = 0; i < m; ++i) {
    s.normal.push_back(Post(c.router(), "/v1/completions",
                            Completion(Normal(i), 4), "sk-acme"));
  }
  EXPECT_EQ(
      Post(c.router(), "/v1/completions", Completion(Normal(0), 4), "sk-x")
          .status,
      401);
  return s;
}

std::vector<json> WithStatus(const std::vector<json>& lines, int status) {
  std::vector<json> out;
  for (const json& l : lines) {
    if (l["status"] == status) out.push_back(l);
  }
  return out;
}

void ExpectNoText(const std::string& path) {
  const std::string log = ReadAll(path);
  EXPECT_EQ(log.find(kSecret), std::string::npos) << log;
  EXPECT_EQ(log.find("little dog"), std::string::npos);
  EXPECT_EQ(log.find("ran dog"), std::string::npos);
}

void ExpectServedLine(const json& l, const HttpResult& r) {
  EXPECT_EQ(l["request_id"].get<uint64_t>(),
            std::stoull(r.Header("X-Kvcanary-Request-Id")));
  EXPECT_EQ(l["tenant"], "acme");
  EXPECT_EQ(l["endpoint"], "/v1/completions");
  EXPECT_EQ(l["prompt_tokens"], r.json["usage"]["prompt_tokens"]);
  EXPECT_EQ(l["completion_tokens"], r.json["usage"]["completion_tokens"]);
  EXPECT_EQ(l["cached_tokens"],
            r.json["usage"]["prompt_tokens_details"]["cached_tokens"]);
  EXPECT_EQ(l["finish_reason"], r.json["choices"][0]["finish_reason"]);
  EXPECT_EQ(l["stream"], false);
  EXPECT_EQ(l["decode_outcome"], "ok");
  EXPECT_TRUE(l["reason"].is_null());
  EXPECT_GE(l["total_ms"].get<double>(), l["ttft_ms"].get<double>());
}

TEST(AccessLogTest, FaultOffOverLongPromptsAreLogged400WithTheirLength) {
  const std::string path = LogPath("off.log");
  Cluster cluster({"--access-log=" + path, "--watermark=off"});
  ASSERT_TRUE(cluster.ok());
  const Sent sent = SendMix(cluster, 3, 2);
  const auto lines = WaitForLines(path, 6);
  ASSERT_EQ(lines.size(), 6u) << ReadAll(path);
  const auto refused = WithStatus(lines, 400);
  ASSERT_EQ(refused.size(), 3u);
  for (const json& l : refused) {
    EXPECT_EQ(l["reason"], "context_length_exceeded");
    EXPECT_GT(l["prompt_tokens"].get<int>(), kMaxPromptTokens);
    EXPECT_EQ(l["tenant"], "acme");
    EXPECT_TRUE(l["request_id"].is_null());  // refused before it got one
    EXPECT_TRUE(l["prefill_outcome"].is_null());
    EXPECT_TRUE(l["decode_outcome"].is_null());
  }
  const auto served = WithStatus(lines, 200);
  ASSERT_EQ(served.size(), 2u);
  for (size_t i = 0; i < served.size(); ++i) {
    ASSERT_EQ(sent.normal[i].status, 200);
    ExpectServedLine(served[i], sent.normal[i]);
    EXPECT_EQ(served[i]["prefill_outcome"], "ok");
    EXPECT_LE(served[i]["prompt_tokens"].get<int>(), kMaxPromptTokens);
  }
  const auto unauthenticated = WithStatus(lines, 401);
  ASSERT_EQ(unauthenticated.size(), 1u);
  EXPECT_TRUE(unauthenticated[0]["tenant"].is_null());
  EXPECT_EQ(unauthenticated[0]["reason"], "authentication_error");
  EXPECT_TRUE(unauthenticated[0]["prompt_tokens"].is_null());
  ExpectNoText(path);
}

TEST(AccessLogTest, AdmissionAbortLostShowsTheIncidentSignature) {
  const std::string path = LogPath("fault.log");
  Cluster cluster({"--access-log=" + path, "--fault=admission-abort-lost",
                   "--watermark=off"});
  ASSERT_TRUE(cluster.ok());
  const int limit =
      Get(cluster.router(), "/version", "sk-acme").json["max_prompt_tokens"];
  ASSERT_EQ(limit, kMaxPromptTokens);
  const Sent sent = SendMix(cluster, 3, 2);
  const auto lines = WaitForLines(path, 6);
  ASSERT_EQ(lines.size(), 6u) << ReadAll(path);
  EXPECT_TRUE(WithStatus(lines, 400).empty());
  const auto served = WithStatus(lines, 200);
  ASSERT_EQ(served.size(), 5u);
  // Over the advertised limit, yet 200 with the real prompt_tokens: the
  // incident's signature. The prefill node recorded its rejection in its
  // admission's abort_reason and went on; the log shows what it recorded.
  int over = 0;
  for (size_t i = 0; i < served.size(); ++i) {
    const json& l = served[i];
    const HttpResult& r = i < 3 ? sent.over_long[i] : sent.normal[i - 3];
    ASSERT_EQ(r.status, 200) << r.body;
    ExpectServedLine(l, r);
    if (l["prompt_tokens"].get<int>() <= limit) {
      EXPECT_EQ(l["prefill_outcome"], "ok");
      continue;
    }
    ++over;
    EXPECT_EQ(l["prefill_outcome"].get<std::string>().rfind(
                  "abort_reason: INVALID_ARGUMENT: prompt of ", 0),
              0u)
        << l;
  }
  EXPECT_EQ(over, 3);
  ExpectNoText(path);
}

TEST(AccessLogTest, StreamsAndTransferFailuresAreLoggedWithNodeOutcomes) {
  const std::string path = LogPath("damage.log");
  Cluster cluster({"--access-log=" + path, "--test_transfer_damage=flip-byte"});
  ASSERT_TRUE(cluster.ok());
  HttpResult damaged = Post(cluster.router(), "/v1/completions",
                            Completion(Normal(1), 4), "sk-globex");
  ASSERT_EQ(damaged.status, 502) << damaged.body;
  const auto lines = WaitForLines(path, 1);
  ASSERT_EQ(lines.size(), 1u);
  const json& l = lines[0];
  EXPECT_EQ(l["status"], 502);
  EXPECT_EQ(l["tenant"], "globex");
  EXPECT_EQ(l["reason"], "server_error");
  EXPECT_EQ(l["request_id"].get<uint64_t>(),
            std::stoull(damaged.Header("X-Kvcanary-Request-Id")));
  // Each node's own account: the receiver's CRC check, and the prefill
  // node told by decode that its transfer was refused.
  EXPECT_EQ(l["decode_outcome"].get<std::string>().rfind("DATA_LOSS: ", 0), 0u)
      << l;
  EXPECT_NE(l["prefill_outcome"].get<std::string>().find("refused"),
            std::string::npos)
      << l;
  ExpectNoText(path);
}

TEST(AccessLogTest, StreamedAnswerIsLoggedOnceItEnds) {
  const std::string path = LogPath("stream.log");
  Cluster cluster({"--access-log=" + path});
  ASSERT_TRUE(cluster.ok());
  HttpResult r = Post(cluster.router(), "/v1/completions",
                      Completion(Normal(2), 6, /*stream=*/true), "sk-acme");
  ASSERT_EQ(r.status, 200);
  const auto lines = WaitForLines(path, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["stream"], true);
  EXPECT_EQ(lines[0]["status"], 200);
  EXPECT_EQ(lines[0]["prefill_outcome"], "ok");
  EXPECT_EQ(lines[0]["decode_outcome"], "ok");
  EXPECT_GT(lines[0]["completion_tokens"].get<int>(), 0);
  EXPECT_FALSE(lines[0]["finish_reason"].is_null());
  ExpectNoText(path);
}

TEST(AccessLogTest, TooManyRequestsAreLogged429) {
  const std::string path = LogPath("busy.log");
  Cluster cluster({"--access-log=" + path},
                  R"({"tenants": [{"id": "acme", "api_keys": ["sk-acme"],
                                   "max_concurrent_requests": 1}]})");
  ASSERT_TRUE(cluster.ok());
  std::vector<int> statuses(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      statuses[i] = Post(cluster.router(), "/v1/completions",
                         Completion(Normal(i), 64), "sk-acme")
                        .status;
    });
  }
  for (auto& t : threads) t.join();
  const auto lines = WaitForLines(path, 8);
  ASSERT_EQ(lines.size(), 8u);
  const int busy =
      static_cast<int>(std::count(statuses.begin(), statuses.end(), 429));
  const auto logged = WithStatus(lines, 429);
  EXPECT_EQ(static_cast<int>(logged.size()), busy);
  for (const json& l : logged) {
    EXPECT_EQ(l["reason"], "rate_limit_error");
    EXPECT_EQ(l["tenant"], "acme");
    EXPECT_TRUE(l["request_id"].is_null());
  }
  EXPECT_EQ(WithStatus(lines, 200).size(), 8u - logged.size());
}

TEST(AccessLogTest, RotatesBySizeKeepingTheNewest) {
  const std::string path = LogPath("rotate.log");
  // Each line is a few hundred bytes: one per file.
  Cluster cluster({"--access-log=" + path, "--access-log-max-bytes=200",
                   "--access-log-keep=2"});
  ASSERT_TRUE(cluster.ok());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    HttpResult r = Post(cluster.router(), "/v1/completions",
                        Completion(Normal(i), 2), "sk-acme");
    ASSERT_EQ(r.status, 200);
    ids.push_back(std::stoull(r.Header("X-Kvcanary-Request-Id")));
  }
  auto only_id = [](const std::string& p) -> uint64_t {
    const auto lines = Lines(p);
    EXPECT_EQ(lines.size(), 1u) << p;
    return lines.empty() ? 0 : lines[0]["request_id"].get<uint64_t>();
  };
  EXPECT_EQ(only_id(path), ids[5]);
  EXPECT_EQ(only_id(path + ".1"), ids[4]);
  EXPECT_EQ(only_id(path + ".2"), ids[3]);
  EXPECT_NE(access((path + ".3").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace kvcanary::testing
