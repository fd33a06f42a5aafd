// The router's access log: one JSON line per request, rotated by size, safe
// to write from many threads.
#include "engine/nodes/access_log.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/temp_path.h"

namespace kvcanary::engine {
namespace {

using json = nlohmann::json;

std::string TempPath(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-access", name);
}

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

AccessRecord Served(uint64_t id) {
  AccessRecord r;
  r.start = absl::FromUnixMillis(1700000000123);
  r.endpoint = "/v1/completions";
  r.request_id = id;
  r.tenant = "acme";
  r.status = 200;
  r.prompt_tokens = 301;
  r.completion_tokens = 8;
  r.cached_tokens = 16;
  r.ttft_ms = 12.3456;
  r.total_ms = 40.5;
  r.finish_reason = "length";
  r.prefill_outcome = "ok";
  r.decode_outcome = "ok";
  return r;
}

TEST(AccessLogTest, RecordIsOneJsonLineWithEveryFieldInOrder) {
  const std::string line = AccessRecordJson(Served(42));
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(
      line,
      R"({"ts":"2023-11-14T22:13:20.123Z","request_id":42,"tenant":"acme",)"
      R"("endpoint":"/v1/completions","status":200,"prompt_tokens":301,)"
      R"("completion_tokens":8,"cached_tokens":16,"ttft_ms":12.346,)"
      R"("total_ms":40.5,"finish_reason":"length","stream":false,)"
      R"("prefill_outcome":"ok","decode_outcome":"ok","reason":null})");
}

TEST(AccessLogTest, UnknownValuesOfARefusalAreNull) {
  AccessRecord r;
  r.start = absl::FromUnixMillis(0);
  r.endpoint = "/v1/chat/completions";
  r.status = 401;
  r.reason = "authentication_error";
  const json j = json::parse(AccessRecordJson(r));
  for (const char* field :
       {"request_id", "tenant", "prompt_tokens", "ttft_ms", "finish_reason",
        "prefill_outcome", "decode_outcome"}) {
    EXPECT_TRUE(j[field].is_null()) << field;
  }
  EXPECT_EQ(j["ts"], "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(j["status"], 401);
  EXPECT_EQ(j["reason"], "authentication_error");
}

TEST(AccessLogTest, AppendsToAnExistingFile) {
  const std::string path = TempPath("append.log");
  std::ofstream(path) << "earlier\n";
  auto log = AccessLog::Open({path});
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Write(Served(1));
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "earlier");
  EXPECT_EQ(json::parse(lines[1])["request_id"], 1);
}

TEST(AccessLogTest, RotatesBySizeKeepingTheNewestFiles) {
  const std::string path = TempPath("rotate.log");
  const size_t line_bytes = AccessRecordJson(Served(1)).size() + 1;
  // Two lines fit in a file; the third rotates.
  AccessLogOptions o{path, static_cast<int64_t>(2 * line_bytes + 1), 2};
  auto log = AccessLog::Open(o);
  ASSERT_TRUE(log.ok()) << log.status();
  for (uint64_t id = 1; id <= 7; ++id) (*log)->Write(Served(id));
  // FILE: 7; FILE.1: 5, 6; FILE.2: 3, 4; 1 and 2 rotated away.
  auto ids = [](const std::string& p) {
    std::vector<int> out;
    for (const std::string& l : Lines(p))
      out.push_back(json::parse(l)["request_id"]);
    return out;
  };
  EXPECT_EQ(ids(path), (std::vector<int>{7}));
  EXPECT_EQ(ids(path + ".1"), (std::vector<int>{5, 6}));
  EXPECT_EQ(ids(path + ".2"), (std::vector<int>{3, 4}));
  EXPECT_FALSE(Exists(path + ".3"));
  EXPECT_EQ((*log)->write_errors(), 0u);
}

TEST(AccessLogTest, KeepZeroStartsTheFileOver) {
  const std::string path = TempPath("keep0.log");
  auto log = AccessLog::Open({path, 10, 0});
  ASSERT_TRUE(log.ok());
  for (uint64_t id = 1; id <= 3; ++id) (*log)->Write(Served(id));
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 1u);  // a line longer than max_bytes stays whole
  EXPECT_EQ(json::parse(lines[0])["request_id"], 3);
  EXPECT_FALSE(Exists(path + ".1"));
}

TEST(AccessLogTest, ConcurrentWritersNeverInterleaveLines) {
  const std::string path = TempPath("threads.log");
  auto log = AccessLog::Open({path, int64_t{1} << 30, 1});
  ASSERT_TRUE(log.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) (*log)->Write(Served(t * 1000 + i));
    });
  }
  for (auto& t : threads) t.join();
  const auto lines = Lines(path);
  ASSERT_EQ(lines.size(), 1600u);
  for (const std::string& l : lines) {
    EXPECT_FALSE(json::parse(l, nullptr, false).is_discarded()) << l;
  }
}

TEST(AccessLogTest, BadOptionsAndUnwritablePathsAreRefused) {
  EXPECT_EQ(AccessLog::Open({""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AccessLog::Open({TempPath("x"), 0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AccessLog::Open({TempPath("x"), 10, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(AccessLog::Open({"/nonexistent-dir/access.log"}).ok());
}

}  // namespace
}  // namespace kvcanary::engine
