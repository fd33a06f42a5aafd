// `forensics` on synthetic request logs: the router's access log (with its
// rotated files) and another engine's through a field mapping (the shipped
// SGLang example),
// with exact counts per tenant and time window, unreadable lines, fields a
// rule needs missing, and the first-token floor taken from a calibration
// recorded in a real SQLite evidence file.
#include "auditor/audits/forensics/forensics.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/audits/forensics/log.h"
#include "auditor/audits/forensics/rules.h"
#include "auditor/evidence/log.h"
#include "common/sha256.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"
#include "tests/shared_files.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

constexpr int kLimit = 256;

std::string TempFile(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-forensics", name);
}

// A served request in the router's access log; `over` replaces fields.
json Served(const std::string& tenant, uint64_t id, const std::string& ts,
            const json& over = json::object()) {
  json j = {{"ts", ts},
            {"request_id", id},
            {"tenant", tenant},
            {"endpoint", "/v1/completions"},
            {"status", 200},
            {"prompt_tokens", 20},
            {"completion_tokens", 4},
            {"cached_tokens", 0},
            {"ttft_ms", 30.0},
            {"total_ms", 40.0},
            {"finish_reason", "length"},
            {"stream", false},
            {"prefill_outcome", "ok"},
            {"decode_outcome", "ok"},
            {"reason", nullptr}};
  for (const auto& [k, v] : over.items()) j[k] = v;
  return j;
}

// An over-long prompt refused at admission.
json Refused(const std::string& tenant, const std::string& ts) {
  return Served(tenant, 0, ts,
                {{"request_id", nullptr},
                 {"status", 400},
                 {"prompt_tokens", 301},
                 {"completion_tokens", 0},
                 {"ttft_ms", nullptr},
                 {"finish_reason", nullptr},
                 {"prefill_outcome", nullptr},
                 {"decode_outcome", nullptr},
                 {"reason", "context_length_exceeded"}});
}

std::string WriteLog(const std::vector<std::string>& lines,
                     bool final_newline = true,
                     std::string path = TempFile("access.log")) {
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < lines.size(); ++i) {
    out << lines[i];
    if (i + 1 < lines.size() || final_newline) out << "\n";
  }
  return path;
}

std::vector<std::string> Dump(const std::vector<json>& lines) {
  std::vector<std::string> out;
  for (const json& j : lines) out.push_back(j.dump());
  return out;
}

ForensicsOptions Options(const std::string& log) {
  ForensicsOptions o;
  o.log_path = log;
  o.input_limit = kLimit;
  o.db_path = TempFile("evidence.db");
  o.progress = false;
  return o;
}

CampaignResult RunLog(const ForensicsOptions& o) {
  AuditorMetrics metrics;
  return RunForensics(o, &metrics);
}

std::string Explain(const CampaignResult& r) { return r.ToJson().dump(2); }

const json& Details(const CampaignResult& r) { return r.details; }

// The counts entry of `tenant` in the window starting at `start`.
json Window(const CampaignResult& r, const std::string& tenant,
            const std::string& start) {
  for (const json& c : r.details["counts"]) {
    if (c["tenant"] == tenant && c["window_start"] == start) return c;
  }
  return nullptr;
}

std::vector<storage::EvidenceRow> Rows(const std::string& db,
                                       const std::string& campaign,
                                       const std::string& kind) {
  auto store = storage::EvidenceStore::Open(db);
  EXPECT_TRUE(store.ok()) << store.status();
  storage::EvidenceFilter filter;
  filter.kind = kind;
  filter.campaign = campaign;
  auto rows = (*store)->Query(filter);
  EXPECT_TRUE(rows.ok()) << rows.status();
  return *rows;
}

// The result document must validate against the schema, when
// python3-jsonschema is installed (else only that part is skipped).
void ExpectValidDocument(const CampaignResult& r) {
  KVC_REQUIRE_TOOL("python3 -c 'import jsonschema'", "python3-jsonschema");
  const std::string doc = TempFile("result.json");
  std::ofstream(doc) << r.ToJson().dump(2);
  const std::string cmd = absl::StrCat(
      "python3 -c 'import json,sys,jsonschema; "
      "s=json.load(open(sys.argv[1])); d=json.load(open(sys.argv[2])); "
      "jsonschema.Draft202012Validator(s).validate(d)' ",
      KVCANARY_SOURCE_DIR, "/docs/campaign-result.schema.json ", doc);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << Explain(r);
}

bool AnyReasonHas(const CampaignResult& r, const std::string& text) {
  for (const std::string& why : r.reasons) {
    if (why.find(text) != std::string::npos) return true;
  }
  return false;
}

// --- the command, on whole logs -------------------------------------------

TEST(ForensicsTest, CountsEachSignaturePerTenantAndWindowExactly) {
  const std::string abort =
      "abort_reason: INVALID_ARGUMENT: prompt of 301 tokens exceeds the "
      "prefill node's limit of 256";
  const std::vector<std::string> lines = Dump({
      Served("acme", 1, "2024-05-01T12:10:00.000Z",
             {{"prompt_tokens", 301}, {"prefill_outcome", abort}}),
      Served("acme", 2, "2024-05-01T12:20:00.000Z", {{"prompt_tokens", 300}}),
      Served("globex", 3, "2024-05-01T12:30:00.000Z",
             {{"decode_outcome", "DATA_LOSS: kv page frame: CRC mismatch"}}),
      Served("globex", 4, "2024-05-01T12:40:00.000Z"),
      Refused("acme", "2024-05-01T12:50:00.000Z"),
      json{{"ts", "2024-05-01T12:55:00.000Z"},
           {"status", 401},
           {"tenant", nullptr},
           {"prompt_tokens", nullptr},
           {"reason", "authentication_error"}},
      Served("acme", 5, "2024-05-01T13:05:00.000Z", {{"prompt_tokens", 400}}),
  });
  const std::string log = WriteLog(lines);
  const ForensicsOptions o = Options(log);
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_EQ(r.command, "forensics");
  EXPECT_EQ(r.tenants, (std::vector<std::string>{"acme", "globex"}));
  ASSERT_EQ(r.findings.size(), 4u);
  const json& d = Details(r);
  EXPECT_EQ(d["total"]["flagged_at_least"], 4);
  EXPECT_EQ(d["total"]["flagged_by_signature"]["over_limit_served"], 3);
  EXPECT_EQ(d["total"]["flagged_by_signature"]["served_after_node_failure"], 2);
  EXPECT_EQ(d["total"]["over_limit_refused"], 1);
  EXPECT_EQ(d["total"]["served"], 5);
  EXPECT_EQ(d["flagged_request_ids"], json({"1", "2", "3", "5"}));
  EXPECT_EQ(d["exposed"],
            "at least 4 requests (acme 3, globex 1) were served with a "
            "silent-contamination signature; the log shows only what it "
            "recorded");
  const json acme12 = Window(r, "acme", "2024-05-01T12:00:00.000Z");
  ASSERT_TRUE(acme12.is_object()) << d["counts"].dump(2);
  EXPECT_EQ(acme12["flagged_at_least"], 2);
  EXPECT_EQ(acme12["over_limit_refused"], 1);
  EXPECT_EQ(acme12["window_end"], "2024-05-01T13:00:00.000Z");
  EXPECT_EQ(acme12["statement"],
            "at least 2 requests of acme were served with a "
            "silent-contamination signature (over_limit_served 2, "
            "served_after_node_failure 1)");
  EXPECT_NE(acme12["method"].get<std::string>().find("prompt_tokens > 256"),
            std::string::npos);
  EXPECT_EQ(Window(r, "acme", "2024-05-01T13:00:00.000Z")["flagged_at_least"],
            1);
  EXPECT_EQ(Window(r, "globex", "2024-05-01T12:00:00.000Z")["flagged_at_least"],
            1);
  // Severity: both signatures, or a node failure, are critical.
  EXPECT_EQ(r.findings[0].severity, Severity::kCritical);
  EXPECT_EQ(r.findings[1].severity, Severity::kHigh);
  EXPECT_EQ(r.findings[2].kind, "served_after_node_failure");
  // Evidence: the log's hash and size, one row per flagged request, the end.
  std::ifstream in(log, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const auto start = Rows(o.db_path, r.campaign_id, "campaign_start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0].record.body["log_sha256"], Sha256Hex(bytes));
  EXPECT_EQ(start[0].record.body["log_size_bytes"], bytes.size());
  EXPECT_EQ(Rows(o.db_path, r.campaign_id, "finding").size(), 4u);
  const auto end = Rows(o.db_path, r.campaign_id, "campaign_end");
  ASSERT_EQ(end.size(), 1u);
  EXPECT_EQ(end[0].record.body["flagged_at_least"], 4);
  EXPECT_EQ(end[0].record.body["verdict"], "findings");
  EXPECT_FALSE(r.incidents.empty());
  EXPECT_EQ(r.detectors.at(0).name, "log_forensics");
  ExpectValidDocument(r);
}

TEST(ForensicsTest, ALogWithoutASignatureIsCleanAndSaysWhatWasRefused) {
  const CampaignResult r = RunLog(Options(WriteLog(Dump({
      Served("acme", 1, "2024-05-01T12:00:00.000Z"),
      Served("globex", 2, "2024-05-01T12:00:01.000Z",
             {{"decode_outcome", nullptr}}),
      Refused("globex", "2024-05-01T12:00:02.000Z"),
  }))));
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.exit_code(), 0);
  EXPECT_TRUE(r.findings.empty());
  EXPECT_EQ(r.details["total"]["over_limit_refused"], 1);
  EXPECT_NE(r.details["refused_over_limit"].get<std::string>().find(
                "counted as refused, not exposed"),
            std::string::npos);
  EXPECT_EQ(r.detectors.at(0).coverage.at("acme"), 1);
  EXPECT_EQ(r.detectors.at(0).coverage.at("globex"), 1);
  ExpectValidDocument(r);
}

TEST(ForensicsTest, UnreadableLinesAreCountedAndMakeTheVerdictInconclusive) {
  std::vector<std::string> lines =
      Dump({Served("acme", 1, "2024-05-01T12:00:00.000Z"),
            Served("globex", 2, "2024-05-01T12:00:01.000Z")});
  lines.insert(lines.begin() + 1, "garbage from a crashed writer");
  lines.push_back("");
  lines.push_back(R"({"ts":"2024-05-01T12:00:03.000Z","status":200,"prom)");
  const CampaignResult r = RunLog(Options(WriteLog(lines, false)));
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_EQ(r.details["line_counts"]["lines"], 5);
  EXPECT_EQ(r.details["line_counts"]["unreadable"], 2);
  EXPECT_EQ(r.details["line_counts"]["blank"], 1);
  EXPECT_EQ(r.details["line_counts"]["unreadable_first"],
            json({"line 2: not a JSON object", "line 5: not a JSON object"}));
  EXPECT_TRUE(AnyReasonHas(r, "2 of 5 lines could not be read"));
  ExpectValidDocument(r);
}

TEST(ForensicsTest, UnreadableLinesDoNotHideAFinding) {
  std::vector<std::string> lines = Dump({Served(
      "acme", 1, "2024-05-01T12:00:00.000Z", {{"prompt_tokens", 999}})});
  lines.push_back("{not json");
  const CampaignResult r = RunLog(Options(WriteLog(lines)));
  EXPECT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.details["line_counts"]["unreadable"], 1);
}

TEST(ForensicsTest, AServedRequestWithoutItsCountIsNotCheckedNeverClean) {
  const CampaignResult r = RunLog(Options(WriteLog(Dump({
      Served("acme", 1, "2024-05-01T12:00:00.000Z"),
      Served("acme", 2, "2024-05-01T12:00:01.000Z",
             {{"prompt_tokens", nullptr}}),
  }))));
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_TRUE(
      AnyReasonHas(r,
                   "over_limit_served: 1 request could not be checked (missing "
                   "prompt_tokens)"));
  EXPECT_EQ(r.details["rules"][0]["state"], "partial");
}

TEST(ForensicsTest, ALogFormatWithoutStatusCannotBeClean) {
  const std::string mapping = TempFile("mapping.json");
  std::ofstream(mapping) << R"({"formats": {"counts-only": {
      "tenant": "user", "prompt_tokens": "n"}}})";
  ForensicsOptions o =
      Options(WriteLog({R"({"user":"acme","n":20})", R"({"user":"b","n":9})"}));
  o.format = "counts-only";
  o.mapping_path = mapping;
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_TRUE(AnyReasonHas(
      r, "over_limit_served not checked: the log records no status"));
  EXPECT_EQ(r.details["rules"][0]["state"], "not_checked");
}

constexpr char kTarget[] = "http://10.0.0.5:8000";

// Appends a calibration row against `target`, as `probe` records it, to
// `db`.
void RecordCalibration(const std::string& db, const std::string& campaign,
                       bool calibrated, double per_token_ms,
                       const std::string& target = kTarget) {
  auto log = EvidenceLog::Open(db, campaign);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE((*log)
                  ->Record("campaign_start",
                           {{"target", target}, {"command", "probe"}}, true)
                  .ok());
  ASSERT_TRUE((*log)
                  ->Record("calibration",
                           {{"latency",
                             {{"calibrated", calibrated},
                              {"base_ms", 4.0},
                              {"per_token_ms", per_token_ms},
                              {"r2", 0.99},
                              {"failure", calibrated ? "" : "R2 < 0.8"}}}},
                           true)
                  .ok());
}

TEST(ForensicsTest, TheFloorComesFromTheLatestCalibrationOfTheTarget) {
  ForensicsOptions o = Options(WriteLog(Dump({
      // 200 uncached tokens x 30 us = 6 ms: 1 ms is implausibly fast.
      Served("acme", 1, "2024-05-01T12:00:00.000Z",
             {{"prompt_tokens", 200}, {"ttft_ms", 1.0}}),
      Served("acme", 2, "2024-05-01T12:00:01.000Z",
             {{"prompt_tokens", 200}, {"ttft_ms", 7.0}}),
      // 190 of 200 cached: floor 0.3 ms, judged and passed.
      Served(
          "globex", 3, "2024-05-01T12:00:02.000Z",
          {{"prompt_tokens", 200}, {"cached_tokens", 190}, {"ttft_ms", 1.0}}),
      // 5 tokens: 0.15 ms, too short to judge.
      Served("globex", 4, "2024-05-01T12:00:03.000Z",
             {{"prompt_tokens", 5}, {"ttft_ms", 0.01}}),
  })));
  RecordCalibration(o.db_path, "c20240501T100000-00000001", true, 1.0);
  RecordCalibration(o.db_path, "c20240501T110000-00000002", true, 0.1);
  // Later, but of another server: not used.
  RecordCalibration(o.db_path, "c20240501T120000-00000003", true, 5.0,
                    "http://10.0.0.9:8000");
  // Later, of this server, but accept's: it times no first tokens.
  {
    auto log = EvidenceLog::Open(o.db_path, "c20240501T130000-00000004");
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)
                    ->Record("campaign_start",
                             {{"target", kTarget}, {"command", "accept"}}, true)
                    .ok());
    ASSERT_TRUE((*log)->Record("calibration", {{"limit", 256}}, true).ok());
  }
  o.calibration_target = std::string(kTarget) + "/";
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].kind, "ttft_below_floor");
  EXPECT_EQ(r.findings[0].engine_request, 1u);
  EXPECT_NEAR(r.findings[0].detail["floor_ms"].get<double>(), 6.0, 1e-9);
  const json& floor = r.details["floor"];
  EXPECT_NEAR(floor["us_per_token"].get<double>(), 30.0, 1e-9);
  EXPECT_FALSE(floor["from_flag"].get<bool>());
  EXPECT_EQ(floor["calibration"]["campaign"], "c20240501T110000-00000002");
  EXPECT_EQ(floor["calibration"]["target"], "http://10.0.0.5:8000/");
  // A record from before calibrations named their API was measured over
  // completions, and the source says so.
  EXPECT_EQ(floor["calibration"]["api"], "completions");
  EXPECT_NE(
      floor["source"].get<std::string>().find("measured over text completions"),
      std::string::npos);
  EXPECT_NE(
      floor["source"].get<std::string>().find("c20240501T110000-00000002"),
      std::string::npos);
  EXPECT_EQ(r.details["total"]["ttft_too_short_to_judge"], 1);
  EXPECT_EQ(r.details["rules"][kTtftRule]["checked"], 3);
  // The flag wins over the store.
  o.ttft_floor_us_per_token = 2;  // 0.4 ms for 200 tokens
  const CampaignResult flagged = RunLog(o);
  EXPECT_EQ(flagged.verdict, Verdict::kClean) << Explain(flagged);
  EXPECT_TRUE(flagged.details["floor"]["from_flag"].get<bool>());
}

TEST(ForensicsTest, ACalibrationWithoutALatencyFitLeavesTheRuleOff) {
  ForensicsOptions o = Options(WriteLog(Dump({
      Served("acme", 1, "2024-05-01T12:00:00.000Z",
             {{"prompt_tokens", 200}, {"ttft_ms", 0.5}}),
  })));
  RecordCalibration(o.db_path, "c20240501T100000-00000001", true, 1.0);
  RecordCalibration(o.db_path, "c20240501T110000-00000002", false, 0);
  o.calibration_target = kTarget;
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.details["ttft_floor"].get<std::string>().rfind("none: ", 0), 0u);
  EXPECT_NE(r.details["floor"]["source"].get<std::string>().find(
                "has no latency fit: R2 < 0.8"),
            std::string::npos);
  EXPECT_EQ(r.details["rules"][kTtftRule]["state"], "disabled");
}

TEST(ForensicsTest, WithoutAFloorTheFirstTokenRuleIsOffAndSaysWhy) {
  ForensicsOptions o = Options(WriteLog(Dump({
      Served("acme", 1, "2024-05-01T12:00:00.000Z", {{"ttft_ms", 0.001}}),
  })));
  // A calibration in --db, but no --calibration-target: not used (it may
  // describe another server).
  RecordCalibration(o.db_path, "c20240501T100000-00000001", true, 1.0);
  CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  ASSERT_FALSE(r.detectors.at(0).notes.empty());
  EXPECT_EQ(r.detectors.at(0).notes[0],
            "ttft_below_floor disabled: no first-token floor: pass "
            "--ttft-floor-us-per-token X, or --calibration-target URL "
            "(the server the log is from) to use the latest calibration "
            "against it in --db");
  o.calibration_target = "http://10.0.0.9:8000";
  r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.detectors.at(0).notes.at(0),
            "ttft_below_floor disabled: no first-token floor: no calibration "
            "against http://10.0.0.9:8000 in --db");
}

TEST(ForensicsTest, AFloorGivenByFlagNeedsFirstTokenTimesInTheLog) {
  const std::string mapping = TempFile("mapping.json");
  std::ofstream(mapping) << R"({"formats": {"no-times": {
      "tenant": "user", "status": "code", "prompt_tokens": "n"}}})";
  ForensicsOptions o =
      Options(WriteLog({R"({"user":"acme","code":200,"n":20})"}));
  o.format = "no-times";
  o.mapping_path = mapping;
  o.ttft_floor_us_per_token = 30;
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_TRUE(AnyReasonHas(r,
                           "ttft_below_floor not checked: the log records no "
                           "first-token time (ttft_ms)"));
  // The same log without the flag: the rules it can run found nothing.
  o.ttft_floor_us_per_token = 0;
  EXPECT_EQ(RunLog(o).verdict, Verdict::kClean);
}

// The shape SGLang writes with --log-requests --log-requests-level 0
// --log-requests-format json (request_logger.py), --enable-metrics on for
// some lines and off for others, a gateway's tenant header logged.
std::vector<std::string> SglangLog() {
  auto finished = [](const std::string& rid, const std::string& tenant,
                     const json& meta, const std::string& ts) {
    json j = {{"timestamp", ts},
              {"event", "request.finished"},
              {"rid", rid},
              {"obj", {{"rid", rid}, {"stream", true}}},
              {"out", {{"meta_info", meta}}}};
    if (!tenant.empty()) j["headers"] = {{"x-tenant", tenant}};
    return j.dump();
  };
  auto meta = [](const json& finish, int prompt, double received,
                 double first_token) {
    json m = {{"id", "x"},
              {"finish_reason", finish},
              {"prompt_tokens", prompt},
              {"completion_tokens", 8},
              {"cached_tokens", 0},
              {"e2e_latency", 0.2}};
    if (received > 0) {
      m["request_received_ts"] = received;
      m["prefill_finished_ts"] = first_token;
    }
    return m;
  };
  const json stop = {{"type", "stop"}, {"matched", 2}};
  return {
      R"({"timestamp": "2024-05-01T12:00:00.000001", "event": "request.received", "rid": "r1", "obj": {"rid": "r1"}})",
      // Over the limit, served: the signature.
      finished("r1", "acme", meta(stop, 300, 1714564800.0, 1714564800.05),
               "2024-05-01T12:00:00.2"),
      // Within the limit, first token far too fast for 200 tokens.
      finished("r2", "acme", meta(stop, 200, 1714564801.0, 1714564801.0005),
               "2024-05-01T12:00:01.2"),
      // Over the limit but aborted with a status: refused.
      finished("r3", "globex",
               meta({{"type", "abort"}, {"status_code", 400}}, 300, 0, 0),
               "2024-05-01T12:00:02.2"),
      // No metrics, no tenant header: a naive timestamp, no first token.
      finished("r4", "", meta({{"type", "length"}}, 40, 0, 0),
               "2024-05-01T13:30:00.0"),
  };
}

ForensicsOptions SglangOptions() {
  ForensicsOptions o = Options(WriteLog(SglangLog()));
  o.format = "sglang-request-log";
  o.mapping_path =
      std::string(KVCANARY_SOURCE_DIR) + "/docs/forensics-mappings/sglang.json";
  return o;
}

TEST(ForensicsTest, TheShippedSglangMappingCountsItsLogExactly) {
  const CampaignResult r = RunLog(SglangOptions());
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  const json& d = r.details;
  EXPECT_EQ(d["line_counts"]["requests"], 4);
  EXPECT_EQ(d["line_counts"]["other_events"], 1);
  EXPECT_EQ(d["total"]["flagged_at_least"], 1);
  EXPECT_EQ(d["flagged_request_ids"], json({"r1"}));
  EXPECT_EQ(d["total"]["over_limit_refused"], 1);
  EXPECT_EQ(d["total"]["served"], 3);
  EXPECT_EQ(r.findings.at(0).reader, "acme");
  EXPECT_EQ(r.findings.at(0).ts_us, int64_t{1714564800000000});
  EXPECT_EQ(r.tenants,
            (std::vector<std::string>{"(no tenant)", "acme", "globex"}));
  EXPECT_EQ(Window(r, "(no tenant)", "2024-05-01T13:00:00.000Z")["served"], 1);
  EXPECT_EQ(d["rules"][kNodeFailureRule]["state"], "disabled");
  ExpectValidDocument(r);
}

TEST(ForensicsTest, TheSglangMappingTimesFirstTokensWhereMetricsWereOn) {
  ForensicsOptions o = SglangOptions();
  o.ttft_floor_us_per_token = 30;  // 200 tokens: 6 ms; r2 took 0.5 ms
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.details["flagged_request_ids"], json({"r1", "r2"}));
  EXPECT_EQ(r.findings.at(1).kind, "ttft_below_floor");
  // r4 was logged without metrics: the rule could not time it.
  EXPECT_EQ(r.details["rules"][kTtftRule]["unchecked"], 1);
  EXPECT_TRUE(
      AnyReasonHas(r,
                   "ttft_below_floor: 1 request could not be checked (missing "
                   "ttft_ms)"));
}

TEST(ForensicsTest, RotatedFilesAreReadOldestFirstAndEachIsHashed) {
  const std::string log = TempFile("rotated.log");
  WriteLog(Dump({Served("acme", 1, "2024-05-01T12:00:00.000Z",
                        {{"prompt_tokens", 300}})}),
           true, log + ".2");
  WriteLog({"not json", Served("globex", 2, "2024-05-01T12:00:01.000Z").dump()},
           true, log + ".1");
  WriteLog(Dump({Served("acme", 3, "2024-05-01T12:00:02.000Z",
                        {{"prompt_tokens", 400}})}),
           true, log);
  WriteLog({"ignored: not FILE.N"}, true, log + ".old");
  const ForensicsOptions o = Options(log);
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  const json& d = r.details;
  EXPECT_EQ(d["line_counts"]["requests"], 3);
  EXPECT_EQ(d["line_counts"]["unreadable_first"],
            json({log + ".1 line 1: not a JSON object"}));
  EXPECT_EQ(d["flagged_request_ids"], json({"1", "3"}));
  EXPECT_EQ(d["flagged"][0]["file"], log + ".2");
  EXPECT_EQ(d["flagged"][0]["line"], 1);
  EXPECT_NE(d["log"].get<std::string>().find("3 files read oldest first"),
            std::string::npos)
      << d["log"];
  const auto start = Rows(o.db_path, r.campaign_id, "campaign_start");
  ASSERT_EQ(start.size(), 1u);
  const json& files = start[0].record.body["log_files"];
  ASSERT_EQ(files.size(), 3u) << files;
  const std::vector<std::string> order = {log + ".2", log + ".1", log};
  for (size_t i = 0; i < order.size(); ++i) {
    std::ifstream in(order[i], std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(files[i]["path"], order[i]);
    EXPECT_EQ(files[i]["sha256"], Sha256Hex(bytes));
    EXPECT_EQ(files[i]["size_bytes"], bytes.size());
  }
  EXPECT_EQ(start[0].record.body["log_sha256"], files[2]["sha256"]);
}

TEST(ForensicsTest, ALineOverOneMebibyteIsUnreadableAndTheNextIsRead) {
  const std::string huge(size_t{3} << 20, 'x');
  const CampaignResult r = RunLog(Options(
      WriteLog({Served("acme", 1, "2024-05-01T12:00:00.000Z").dump(), huge,
                Served("acme", 2, "2024-05-01T12:00:01.000Z").dump(), huge},
               /*final_newline=*/false)));
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << r.reasons.at(0);
  EXPECT_EQ(r.details["line_counts"]["lines"], 4);
  EXPECT_EQ(r.details["line_counts"]["requests"], 2);
  EXPECT_EQ(r.details["line_counts"]["unreadable_first"],
            json({"line 2: longer than 1048576 bytes",
                  "line 4: longer than 1048576 bytes"}));
}

TEST(ForensicsTest, ALogWithRequestsButNoneServedIsInconclusive) {
  const CampaignResult r = RunLog(Options(WriteLog(Dump({
      Refused("acme", "2024-05-01T12:00:00.000Z"),
      Refused("globex", "2024-05-01T12:00:01.000Z"),
  }))));
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_TRUE(AnyReasonHas(r, "no served request to judge (2 requests"));
}

TEST(ForensicsTest, AFlaggedLineWithoutATimeHasNoTimeAndNoWindow) {
  const CampaignResult r = RunLog(Options(WriteLog(Dump({
      Served("acme", 1, "2024-05-01T12:00:00.000Z", {{"ts", nullptr}}),
      Served("acme", 2, "2024-05-01T12:00:00.000Z",
             {{"ts", nullptr}, {"prompt_tokens", 300}}),
  }))));
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].ts_us, 0);
  EXPECT_EQ(r.findings[0].group["window"], "none");
  EXPECT_TRUE(r.findings[0].detail["ts"].is_null());
  ASSERT_EQ(r.details["counts"].size(), 1u);
  EXPECT_TRUE(r.details["counts"][0]["window_start"].is_null());
}

TEST(ForensicsTest, TheFirstTenFlaggedIdsPerSignatureArePrinted) {
  std::vector<json> lines;
  for (int i = 1; i <= 12; ++i) {
    lines.push_back(Served("acme", i, "2024-05-01T12:00:00.000Z",
                           {{"prompt_tokens", 300}}));
  }
  lines.push_back(Served("acme", 99, "2024-05-01T12:00:00.000Z",
                         {{"decode_outcome", "DATA_LOSS: crc"}}));
  const CampaignResult r = RunLog(Options(WriteLog(Dump(lines))));
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.details["flagged_over_limit_served"],
            "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more (all in the JSON: "
            "flagged_request_ids)");
  EXPECT_EQ(r.details["flagged_served_after_node_failure"], "99");
  EXPECT_FALSE(r.details.contains("flagged_ttft_below_floor"));
  EXPECT_EQ(r.details["flagged_request_ids"].size(), 13u);
}

TEST(ForensicsTest, AMappingWithOneFormatIsUsedWithoutFormatElseAnError) {
  ForensicsOptions o = SglangOptions();
  o.format = "kvcanary";  // the default: the mapping's only format
  const CampaignResult r = RunLog(o);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.details["format"], "sglang-request-log");
  const std::string two = TempFile("mapping.json");
  std::ofstream(two) << R"({"formats": {"a": {"status": "s"},
                                        "b": {"status": "s"}}})";
  o.mapping_path = two;
  o.format = "";
  const CampaignResult err = RunLog(o);
  ASSERT_EQ(err.verdict, Verdict::kError) << Explain(err);
  EXPECT_NE(err.reasons.at(0).find("has 2 log formats (a, b): pass --format"),
            std::string::npos)
      << err.reasons.at(0);
}

TEST(ForensicsTest, AnEmptyLogIsInconclusive) {
  const CampaignResult r = RunLog(Options(WriteLog({})));
  ASSERT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_TRUE(AnyReasonHas(r, "the log holds no request record"));
  ExpectValidDocument(r);
}

TEST(ForensicsTest, AMissingLogOrAnUnknownFormatIsAnError) {
  ForensicsOptions o = Options(TempFile("never-written.log"));
  CampaignResult r = RunLog(o);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.reasons.at(0).find("cannot read --log"), std::string::npos);
  ExpectValidDocument(r);
  o = Options(WriteLog({}));
  o.format = "tgi";
  r = RunLog(o);
  EXPECT_EQ(r.verdict, Verdict::kError);
  EXPECT_NE(r.reasons.at(0).find("--format=tgi needs --mapping"),
            std::string::npos);
}

}  // namespace
}  // namespace kvcanary::auditor
