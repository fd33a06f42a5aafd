// `kvcanary-auditor forensics` on the real router's access log
// (`kvcanary-engine up --access-log`): with admission-abort-lost on and
// watermarks off (the incident), the log alone shows exactly the over-long
// requests that were served; with the fault off they were refused (400)
// and the log is clean; with the fault on and watermarks enforced they end
// 502 and are counted as refused, not exposed. Exact across the log's
// rotation by size, and no prompt text in the log, the evidence or the
// report.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/auditor_cli.h"
#include "tests/integration/cluster.h"

namespace kvcanary::testing {
namespace {

using nlohmann::json;

constexpr int kOverLong = 3;  // N: past the router's limit
constexpr int kNormal = 3;    // M: within it

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The log's files: `path`, then its rotated `path`.1, `path`.2, ...
std::vector<std::string> LogFiles(const std::string& path) {
  std::vector<std::string> out = {path};
  for (int n = 1; std::ifstream(path + "." + std::to_string(n)).good(); ++n) {
    out.push_back(path + "." + std::to_string(n));
  }
  return out;
}

size_t LineCount(const std::string& path) {
  size_t n = 0;
  for (const std::string& file : LogFiles(path)) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) ++n;
  }
  return n;
}

// Waits (10 s at most) until the log (with its rotated files) has `n`
// lines.
void WaitForLines(const std::string& path, size_t n) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (LineCount(path) < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Text of every prompt sent: none of it may be in a log, evidence or report.
const char* const kPromptTexts[] = {"ran dog ran", "the little dog"};

void ExpectNoPromptText(const std::string& what, const std::string& bytes) {
  for (const char* text : kPromptTexts) {
    EXPECT_EQ(bytes.find(text), std::string::npos) << what << " holds " << text;
  }
}

struct Sent {
  int limit = 0;  // max_prompt_tokens of /v1/models
  std::vector<HttpResult> over_long, normal;
};

// N over-long (the last `streamed` of them streamed) and M normal
// requests, the tenants taking turns, one at a time; then the log once it
// holds a line for each.
Sent SendMix(const Cluster& c, const std::string& log, int streamed = 0) {
  Sent s;
  const HttpResult models = Get(c.router(), "/v1/models", "sk-acme");
  s.limit = models.json["data"][0].value("max_prompt_tokens", 0);
  const std::string keys[] = {"sk-acme", "sk-globex"};
  for (int i = 0; i < kOverLong; ++i) {
    const bool stream = i >= kOverLong - streamed;
    s.over_long.push_back(Post(c.router(), "/v1/completions",
                               Completion(LongPrompt(150), 4, stream),
                               keys[i % 2]));
  }
  for (int i = 0; i < kNormal; ++i) {
    s.normal.push_back(
        Post(c.router(), "/v1/completions",
             Completion("the little dog " + std::to_string(i), 4),
             keys[(i + 1) % 2]));
  }
  WaitForLines(log, kOverLong + kNormal);
  return s;
}

struct Verdict {
  CliRun run;
  json doc;         // the --json result document
  std::string db;   // the evidence file
  std::string out;  // the --json file's bytes
};

Verdict Forensics(const std::string& log, int limit,
                  const std::vector<std::string>& extra = {}) {
  const std::string out = TempPath("forensics.json");
  Verdict v;
  v.db = TempPath("forensics.db");
  std::vector<std::string> args = {
      "forensics",    "--log=" + log,  "--input-limit=" + std::to_string(limit),
      "--db=" + v.db, "--json=" + out, "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  v.run = Auditor(args);
  v.out = ReadAll(out);
  v.doc = json::parse(v.out, nullptr, false);
  return v;
}

// The incident's log, read: exactly the N over-long requests (one of them
// streamed) flagged, each id listed.
void ExpectTheIncidentCounted(const Sent& sent, const Verdict& v) {
  std::vector<std::string> served_ids;
  for (const HttpResult& r : sent.over_long) {
    served_ids.push_back(r.Header("X-Kvcanary-Request-Id"));
  }
  EXPECT_EQ(v.run.exit_code, 1) << v.run.out;
  ASSERT_TRUE(v.doc.is_object()) << v.run.out;
  EXPECT_EQ(v.doc["verdict"], "findings");
  const json& f = v.doc["forensics"];
  EXPECT_EQ(f["total"]["flagged_by_signature"]["over_limit_served"], kOverLong)
      << f.dump(2);
  // The prefill node recorded its rejection and went on: the log shows it.
  EXPECT_EQ(f["total"]["flagged_by_signature"]["served_after_node_failure"],
            kOverLong);
  EXPECT_EQ(f["total"]["served"], kOverLong + kNormal);
  std::vector<std::string> ids;
  for (const json& flagged : f["flagged"]) {
    if (flagged["prompt_tokens"].get<int>() > sent.limit) {
      ids.push_back(flagged["request_id"]);
    }
  }
  std::sort(ids.begin(), ids.end());
  std::sort(served_ids.begin(), served_ids.end());
  EXPECT_EQ(ids, served_ids);
}

TEST(ForensicsCliTest, CountsExactlyTheOverLongRequestsTheIncidentServed) {
  const std::string log = TempPath("access.log");
  Cluster cluster({"--access-log=" + log, "--fault=admission-abort-lost",
                   "--watermark=off"});
  ASSERT_TRUE(cluster.ok());
  const Sent sent = SendMix(cluster, log, /*streamed=*/1);
  ASSERT_GT(sent.limit, 0);
  for (const HttpResult& r : sent.over_long) {
    ASSERT_EQ(r.status, 200) << r.body;  // the incident: served anyway
  }
  ASSERT_GT(sent.over_long[0].json["usage"]["prompt_tokens"].get<int>(),
            sent.limit);
  for (const HttpResult& r : sent.normal) ASSERT_EQ(r.status, 200) << r.body;

  const Verdict v = Forensics(log, sent.limit);
  ExpectTheIncidentCounted(sent, v);
  const json& f = v.doc["forensics"];
  EXPECT_EQ(f["total"]["flagged_at_least"], kOverLong) << f.dump(2);
  EXPECT_EQ(f["tenants"]["acme"]["flagged_at_least"], 2);
  EXPECT_EQ(f["tenants"]["globex"]["flagged_at_least"], 1);
  EXPECT_EQ(v.doc["findings"]["total"], kOverLong);
  EXPECT_NE(v.run.out.find("at least 3 requests (acme 2, globex 1)"),
            std::string::npos)
      << v.run.out;
  // Without a floor the first-token rule is off and says how to turn it on.
  EXPECT_EQ(f["rules"][1]["kind"], "ttft_below_floor");
  EXPECT_EQ(f["rules"][1]["state"], "disabled");
  // No prompt text anywhere: the access log, the evidence, the report.
  for (const std::string& file : LogFiles(log)) {
    ExpectNoPromptText(file, ReadAll(file));
  }
  ExpectNoPromptText(v.db, ReadAll(v.db));
  ExpectNoPromptText("the --json report", v.out);

  // With a floor (1.1 us per token: judged on the over-long prompts only,
  // whose first token it may or may not flag), the rule runs on every
  // served request (none unchecked), and the over-limit count stays exact.
  const Verdict timed =
      Forensics(log, sent.limit, {"--ttft-floor-us-per-token=1.1"});
  ExpectTheIncidentCounted(sent, timed);
  const json& ttft = timed.doc["forensics"]["rules"][1];
  EXPECT_EQ(ttft["state"], "checked") << ttft.dump(2);
  EXPECT_EQ(ttft["unchecked"], 0);
  const json& total = timed.doc["forensics"]["total"];
  EXPECT_LE(
      ttft["checked"].get<int>() + total["ttft_too_short_to_judge"].get<int>(),
      kOverLong + kNormal)
      << total.dump(2);
  EXPECT_GE(ttft["checked"].get<int>(), 1) << total.dump(2);
  ExpectNoPromptText("the --json report", timed.out);
}

TEST(ForensicsCliTest, CountsExactlyAcrossTheLogsRotation) {
  const std::string log = TempPath("access.log");
  // About two lines per file: the six requests span three or more files.
  Cluster cluster({"--access-log=" + log, "--access-log-max-bytes=900",
                   "--access-log-keep=20", "--fault=admission-abort-lost",
                   "--watermark=off"});
  ASSERT_TRUE(cluster.ok());
  const Sent sent = SendMix(cluster, log);
  for (const HttpResult& r : sent.over_long) ASSERT_EQ(r.status, 200);
  const size_t files = LogFiles(log).size();
  ASSERT_GE(files, 3u) << "the log did not rotate";

  const Verdict v = Forensics(log, sent.limit);
  ExpectTheIncidentCounted(sent, v);
  const json& f = v.doc["forensics"];
  EXPECT_EQ(f["total"]["flagged_at_least"], kOverLong) << f.dump(2);
  EXPECT_EQ(f["line_counts"]["requests"], kOverLong + kNormal);
  EXPECT_EQ(f["source"]["files"].size(), files);
  EXPECT_EQ(f["source"]["files"].back()["path"], log);
  EXPECT_NE(f["log"].get<std::string>().find("files read oldest first"),
            std::string::npos)
      << f["log"];
}

TEST(ForensicsCliTest, ACleanRunsLogIsCleanItsOverLongRequestsRefused) {
  const std::string log = TempPath("access.log");
  Cluster cluster({"--access-log=" + log, "--watermark=off"});
  ASSERT_TRUE(cluster.ok());
  const Sent sent = SendMix(cluster, log);
  for (const HttpResult& r : sent.over_long) ASSERT_EQ(r.status, 400);

  const Verdict v = Forensics(log, sent.limit);
  EXPECT_EQ(v.run.exit_code, 0) << v.run.out;
  ASSERT_TRUE(v.doc.is_object()) << v.run.out;
  EXPECT_EQ(v.doc["verdict"], "clean");
  const json& f = v.doc["forensics"];
  EXPECT_EQ(f["total"]["flagged_at_least"], 0);
  EXPECT_EQ(f["total"]["over_limit_refused"], kOverLong);
  EXPECT_EQ(f["total"]["served"], kNormal);
}

TEST(ForensicsCliTest, UnderEnforcementTheIncidentsRequestsCountAsRefused) {
  const std::string log = TempPath("access.log");
  Cluster cluster({"--access-log=" + log, "--fault=admission-abort-lost",
                   "--watermark=enforce"});
  ASSERT_TRUE(cluster.ok());
  const Sent sent = SendMix(cluster, log);
  for (const HttpResult& r : sent.over_long) {
    ASSERT_EQ(r.status, 502) << r.body;  // refused: no text on foreign pages
  }

  const Verdict v = Forensics(log, sent.limit);
  EXPECT_EQ(v.run.exit_code, 0) << v.run.out;
  ASSERT_TRUE(v.doc.is_object()) << v.run.out;
  const json& f = v.doc["forensics"];
  EXPECT_EQ(f["total"]["flagged_at_least"], 0);
  EXPECT_EQ(f["total"]["over_limit_refused"], kOverLong);
  EXPECT_EQ(f["total"]["refused"], kOverLong);
  EXPECT_NE(v.run.out.find("3 requests over the input limit refused"),
            std::string::npos)
      << v.run.out;
}

}  // namespace
}  // namespace kvcanary::testing
