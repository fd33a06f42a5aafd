// The pieces of `forensics` on their own: log formats (the router's access
// log, field mappings, the shipped SGLang example's edge cases) and the
// rules that judge one logged request.
#include "auditor/audits/forensics/log.h"

#include <cstdint>
#include <string>
#include <vector>

#include "auditor/audits/forensics/rules.h"
#include "auditor/result/finding.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

constexpr int kLimit = 256;

// --- the log formats ------------------------------------------------------

TEST(ForensicsLogTest, ReadsEveryFieldOfTheRoutersAccessLog) {
  const ParsedLine p = LogFormat::Kvcanary().Parse(
      R"({"ts":"2024-05-01T12:00:00.123Z","request_id":42,"tenant":"acme","endpoint":"/v1/completions","status":200,"prompt_tokens":301,"completion_tokens":8,"cached_tokens":16,"ttft_ms":3.06,"total_ms":3.1,"finish_reason":"length","stream":false,"prefill_outcome":"ok","decode_outcome":"ok","reason":null})",
      7);
  ASSERT_EQ(p.kind, LineKind::kRecord) << p.problem;
  const LogRecord& r = p.record;
  EXPECT_EQ(r.line, 7);
  EXPECT_EQ(*r.ts_us, int64_t{1714564800123000});
  EXPECT_EQ(*r.request_id, "42");
  EXPECT_EQ(*r.tenant, "acme");
  EXPECT_EQ(*r.status, 200);
  EXPECT_EQ(*r.prompt_tokens, 301);
  EXPECT_EQ(*r.completion_tokens, 8);
  EXPECT_EQ(*r.cached_tokens, 16);
  EXPECT_DOUBLE_EQ(*r.ttft_ms, 3.06);
  EXPECT_EQ(*r.finish_reason, "length");
  EXPECT_FALSE(*r.stream);
  EXPECT_EQ(*r.prefill_outcome, "ok");
  EXPECT_FALSE(r.reason.has_value());
}

TEST(ForensicsLogTest, NullFieldsAreMissingNotZero) {
  const ParsedLine p = LogFormat::Kvcanary().Parse(
      R"({"ts":"2024-05-01T12:00:00Z","status":401,"tenant":null,"prompt_tokens":null,"ttft_ms":null})",
      1);
  ASSERT_EQ(p.kind, LineKind::kRecord);
  EXPECT_FALSE(p.record.tenant.has_value());
  EXPECT_FALSE(p.record.prompt_tokens.has_value());
  EXPECT_FALSE(p.record.ttft_ms.has_value());
  EXPECT_FALSE(p.record.request_id.has_value());
}

TEST(ForensicsLogTest, AFieldOfTheWrongTypeMakesTheLineUnreadable) {
  const ParsedLine p = LogFormat::Kvcanary().Parse(
      R"({"ts":"2024-05-01T12:00:00Z","status":200,"prompt_tokens":"secret words of a prompt"})",
      3);
  EXPECT_EQ(p.kind, LineKind::kUnreadable);
  EXPECT_EQ(p.problem, "line 3: prompt_tokens is not a count");
  EXPECT_EQ(p.problem.find("secret"), std::string::npos);
  EXPECT_EQ(LogFormat::Kvcanary().Parse(R"({"ts":"yesterday"})", 4).kind,
            LineKind::kUnreadable);
  EXPECT_EQ(LogFormat::Kvcanary().Parse(R"({"status":700})", 5).kind,
            LineKind::kUnreadable);
}

TEST(ForensicsLogTest, ACountPastInt64IsUnreadable) {
  const ParsedLine p = LogFormat::Kvcanary().Parse(
      R"({"status":200,"prompt_tokens":18446744073709551615})", 1);
  EXPECT_EQ(p.kind, LineKind::kUnreadable);
  EXPECT_EQ(p.problem, "line 1: prompt_tokens is not a count");
  const ParsedLine max = LogFormat::Kvcanary().Parse(
      R"({"status":200,"prompt_tokens":9223372036854775807})", 2);
  ASSERT_EQ(max.kind, LineKind::kRecord) << max.problem;
  EXPECT_EQ(*max.record.prompt_tokens, INT64_MAX);
}

TEST(ForensicsLogTest, LongIdsAndTenantsAreCutAtACharacterBoundary) {
  const std::string id(300, 'r');
  std::string tenant = "tt";
  for (int i = 0; i < 100; ++i) tenant += "\u00e9";  // 2 bytes each
  const ParsedLine p = LogFormat::Kvcanary().Parse(
      json{{"status", 200}, {"request_id", id}, {"tenant", tenant}}.dump(), 1);
  ASSERT_EQ(p.kind, LineKind::kRecord) << p.problem;
  EXPECT_EQ(*p.record.request_id, std::string(125, 'r') + "...");
  EXPECT_LE(p.record.tenant->size(), kMaxIdBytes);
  EXPECT_EQ(p.record.tenant->substr(p.record.tenant->size() - 3), "...");
  EXPECT_NO_THROW(json(*p.record.tenant).dump());  // still valid UTF-8
}

TEST(ForensicsLogTest, NotJsonIsUnreadableAndBlankIsBlank) {
  const LogFormat f = LogFormat::Kvcanary();
  EXPECT_EQ(f.Parse("{\"ts\": \"2024-05-01T12:0", 1).kind,
            LineKind::kUnreadable);
  EXPECT_EQ(f.Parse("[1, 2]", 2).kind, LineKind::kUnreadable);
  EXPECT_EQ(f.Parse("INFO server started", 3).problem,
            "line 3: not a JSON object");
  EXPECT_EQ(f.Parse("  \r", 4).kind, LineKind::kBlank);
}

TEST(ForensicsLogTest, AMappingReadsNestedPathsScalesMapsAndDifferences) {
  const json mapping = json::parse(R"({"formats": {"vllm-jsonl": {
      "request_id": "request_id",
      "tenant": "user",
      "status": {"field": "outcome", "map": {"finished": 200, "aborted": 500}},
      "prompt_tokens": "usage.prompt_tokens",
      "ts": {"field": "metrics.arrival_time"},
      "ttft_ms": {"field": "metrics.first_token_time",
                  "minus": "metrics.arrival_time", "scale": 1000},
      "stream": {"const": true},
      "prefill_outcome": null}}})");
  auto f = LogFormat::FromMapping(mapping, "vllm-jsonl");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->Maps("ttft_ms"));
  EXPECT_FALSE(f->Maps("prefill_outcome"));
  EXPECT_FALSE(f->Maps("cached_tokens"));
  const ParsedLine p = f->Parse(
      R"({"request_id":"cmpl-9f","user":"acme","outcome":"finished",
          "usage":{"prompt_tokens":300},
          "metrics":{"arrival_time":1714564800.5,"first_token_time":1714564800.504}})",
      1);
  ASSERT_EQ(p.kind, LineKind::kRecord) << p.problem;
  EXPECT_EQ(*p.record.request_id, "cmpl-9f");
  EXPECT_EQ(*p.record.tenant, "acme");
  EXPECT_EQ(*p.record.status, 200);
  EXPECT_EQ(*p.record.prompt_tokens, 300);
  EXPECT_EQ(*p.record.ts_us, int64_t{1714564800500000});
  EXPECT_NEAR(*p.record.ttft_ms, 4.0, 1e-3);
  EXPECT_TRUE(*p.record.stream);
  // A value the map does not know passes through, and must then fit.
  EXPECT_EQ(f->Parse(R"({"outcome":"timeout"})", 2).problem,
            "line 2: status is not an HTTP status");
  // A key holding dots is found as a key.
  EXPECT_EQ(*FindPath(json::parse(R"({"usage.prompt_tokens": 5})"),
                      "usage.prompt_tokens"),
            5);
}

TEST(ForensicsLogTest, WhereLeavesOtherEventsUncounted) {
  const json mapping = json::parse(R"({"formats": {"x": {
      "where": {"event": "request.finished"}, "status": "code"}}})");
  auto f = LogFormat::FromMapping(mapping, "x");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->Parse(R"({"event":"request.received","code":200})", 1).kind,
            LineKind::kOtherEvent);
  EXPECT_EQ(f->Parse(R"({"code":200})", 2).kind, LineKind::kOtherEvent);
  EXPECT_EQ(f->Parse(R"({"event":"request.finished","code":200})", 3).kind,
            LineKind::kRecord);
}

TEST(ForensicsLogTest, MappingErrorsNameTheFormatAndTheField) {
  auto unknown = LogFormat::FromMapping(
      json::parse(R"({"formats": {"x": {"prompt": "p"}}})"), "x");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("unknown field \"prompt\""),
            std::string::npos);
  auto missing = LogFormat::FromMapping(
      json::parse(R"({"formats": {"a": {}, "b": {}}})"), "c");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("a, b"), std::string::npos);
  auto scale = LogFormat::FromMapping(
      json::parse(
          R"({"formats": {"x": {"ttft_ms": {"field": "t", "scale": 0}}}})"),
      "x");
  EXPECT_NE(scale.status().message().find("field ttft_ms"), std::string::npos);
  EXPECT_FALSE(LogFormat::FromMapping(json::parse("[]"), "x").ok());
  EXPECT_FALSE(LogFormat::Load("sglang", "").ok());  // needs --mapping
  EXPECT_TRUE(LogFormat::Load("kvcanary", "").ok());
}

TEST(ForensicsLogTest, TimesAreRfc3339OrNaiveIsoReadAsUtc) {
  EXPECT_EQ(*ParseLogTime("2024-05-01T12:00:00Z"), int64_t{1714564800000000});
  EXPECT_EQ(*ParseLogTime("2024-05-01T14:00:00.5+02:00"),
            int64_t{1714564800500000});
  EXPECT_EQ(*ParseLogTime("2024-05-01T12:00:00.250000"),
            int64_t{1714564800250000});
  EXPECT_EQ(*ParseLogTime("2024-05-01 12:00:00"), int64_t{1714564800000000});
  EXPECT_FALSE(ParseLogTime("May 1st").has_value());
}

// --- the rules --------------------------------------------------------------

LogRecord Record(int status, int64_t prompt_tokens) {
  LogRecord r;
  r.status = status;
  r.prompt_tokens = prompt_tokens;
  r.completion_tokens = 4;
  r.request_id = "7";
  r.tenant = "acme";
  return r;
}

RuleSet Rules(double floor_us_per_token = 0) {
  TtftFloor floor;
  floor.us_per_token = floor_us_per_token;
  floor.from_flag = floor_us_per_token > 0;
  floor.source = floor.from_flag ? "--ttft-floor-us-per-token" : "none given";
  return MakeRuleSet(LogFormat::Kvcanary(), kLimit, floor);
}

TEST(ForensicsRuleTest, OverTheLimitIsFlaggedOnlyWhenServed) {
  const RuleSet rules = Rules();
  Judgement served = JudgeRequest(Record(200, 301), rules);
  EXPECT_EQ(served.results[kOverLimitRule], RuleResult::kFlagged);
  EXPECT_EQ(served.Signatures(), std::vector<std::string>{"over_limit_served"});
  EXPECT_EQ(JudgeRequest(Record(200, kLimit), rules).results[kOverLimitRule],
            RuleResult::kPassed);
  const Judgement refused = JudgeRequest(Record(502, 301), rules);
  EXPECT_FALSE(refused.flagged());
  EXPECT_TRUE(refused.over_limit_refused);
  EXPECT_EQ(refused.disposition, Disposition::kRefused);
  LogRecord in_stream = Record(200, 301);
  in_stream.completion_tokens = 0;
  in_stream.reason = "server_error";
  const Judgement failed = JudgeRequest(in_stream, rules);
  EXPECT_EQ(failed.disposition, Disposition::kFailedInStream);
  EXPECT_FALSE(failed.flagged());
  EXPECT_TRUE(failed.over_limit_refused);
  LogRecord no_status = Record(200, 301);
  no_status.status.reset();
  const Judgement unknown = JudgeRequest(no_status, rules);
  EXPECT_EQ(unknown.results[kOverLimitRule], RuleResult::kUnchecked);
  EXPECT_EQ(unknown.missing[kOverLimitRule], "status");
}

TEST(ForensicsRuleTest, FirstTokenFloorCountsUncachedTokensAndSkipsShortOnes) {
  const RuleSet rules = Rules(/*floor_us_per_token=*/30);
  LogRecord r = Record(200, 200);
  r.ttft_ms = 5.0;  // floor 200 x 30 us = 6 ms
  Judgement j = JudgeRequest(r, rules);
  EXPECT_EQ(j.results[kTtftRule], RuleResult::kFlagged);
  EXPECT_DOUBLE_EQ(j.floor_ms, 6.0);
  r.cached_tokens = 190;  // 10 uncached: 0.3 ms, just judged
  j = JudgeRequest(r, rules);
  EXPECT_EQ(j.results[kTtftRule], RuleResult::kPassed);
  EXPECT_NEAR(j.floor_ms, 0.3, 1e-9);
  r.cached_tokens = 195;  // 0.15 ms: too short to judge
  EXPECT_EQ(JudgeRequest(r, rules).results[kTtftRule], RuleResult::kTooShort);
  r.ttft_ms.reset();
  r.cached_tokens.reset();
  j = JudgeRequest(r, rules);
  EXPECT_EQ(j.results[kTtftRule], RuleResult::kUnchecked);
  EXPECT_EQ(j.missing[kTtftRule], "ttft_ms");
  r.completion_tokens = 0;  // no text: nothing to time
  EXPECT_EQ(JudgeRequest(r, rules).results[kTtftRule],
            RuleResult::kNotApplicable);
}

TEST(ForensicsRuleTest, ANodeOutcomeOtherThanOkOnAServedRequestIsFlagged) {
  const RuleSet rules = Rules();
  LogRecord r = Record(200, 20);
  r.prefill_outcome = "ok";
  r.decode_outcome = "OK";
  EXPECT_EQ(JudgeRequest(r, rules).results[kNodeFailureRule],
            RuleResult::kPassed);
  r.decode_outcome.reset();  // the router ended the stream itself
  EXPECT_EQ(JudgeRequest(r, rules).results[kNodeFailureRule],
            RuleResult::kPassed);
  r.prefill_outcome = "DATA_LOSS: decode node refused the transfer";
  const Judgement j = JudgeRequest(r, rules);
  EXPECT_EQ(j.results[kNodeFailureRule], RuleResult::kFlagged);
  const Finding f = FlaggedFinding(r, j, rules, "");
  EXPECT_EQ(f.kind, "served_after_node_failure");
  EXPECT_EQ(f.severity, Severity::kCritical);
  EXPECT_EQ(f.detail["prefill_outcome"], "DATA_LOSS");
  r.prefill_outcome.reset();
  EXPECT_EQ(JudgeRequest(r, rules).results[kNodeFailureRule],
            RuleResult::kUnchecked);
}

TEST(ForensicsRuleTest, FindingsCarryIdsAndSeverityNeverOutcomeText) {
  const RuleSet rules = Rules();
  LogRecord r = Record(200, 301);
  r.ts_us = 1714564800000000;
  const Finding high = FlaggedFinding(r, JudgeRequest(r, rules), rules, "w");
  EXPECT_EQ(high.detector, "log_forensics");
  EXPECT_EQ(high.kind, "over_limit_served");
  EXPECT_EQ(high.severity, Severity::kHigh);
  EXPECT_EQ(high.reader, "acme");
  EXPECT_EQ(high.engine_request, 7u);
  EXPECT_EQ(high.ts_us, int64_t{1714564800000000});
  EXPECT_EQ(high.detail["input_limit"], kLimit);
  r.prefill_outcome =
      "abort_reason: INVALID_ARGUMENT: prompt of 301 tokens exceeds the limit";
  r.request_id = "cmpl-abc";
  const Finding both = FlaggedFinding(r, JudgeRequest(r, rules), rules, "w");
  EXPECT_EQ(both.kind, "over_limit_served");
  EXPECT_EQ(both.severity, Severity::kCritical);
  EXPECT_EQ(both.engine_request, 0u);
  EXPECT_EQ(both.detail["request_id"], "cmpl-abc");
  EXPECT_EQ(both.detail["prefill_outcome"], "abort_reason: INVALID_ARGUMENT");
  EXPECT_EQ(both.detail["signatures"],
            json({"over_limit_served", "served_after_node_failure"}));
  EXPECT_EQ(OutcomeClass("transfer refused by decode"), "error");
  EXPECT_EQ(OutcomeClass(" ok "), "ok");
}

}  // namespace
}  // namespace kvcanary::auditor
