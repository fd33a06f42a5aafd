// Campaigns against servers we did not write: scripted fakes that behave
// like vLLM, SGLang, llama.cpp's server or TGI
// (tests/auditor/fakes/fake_target.h, docs/targets.md); how golden modes are
// chosen is in golden_modes_test.cc. Every verdict must be earned: clean only
// with coverage, findings for a silent truncation, error for a refused key or a
// dead target, and never clean when a detector is broken.
#include "auditor/campaign/campaign.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/detectors/registry.h"
#include "auditor/reports/report.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/auditor/campaign/campaign_fixtures.h"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/shared_files.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;
using testing::FakeTarget;
using testing::FakeTargetOptions;
using testing::Flavor;
using testing::OverLimit;
using namespace campaign_fixtures;  // NOLINT: the fixtures of every test here

// A well-behaved server of each kind: every detector but trace (no
// --trace) covered, and clean.
class WellBehavedTest : public ::testing::TestWithParam<Flavor> {};

TEST_P(WellBehavedTest, IsCleanWithEveryDetectorCovered) {
  FakeTarget target(Fake(GetParam()));
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "clean"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.exit_code(), 0);
  // Log-probabilities where the flavor serves them: vLLM and SGLang both;
  // llama.cpp no echo (a 500), so no scored prompts; TGI none.
  const Flavor f = GetParam();
  const bool logprobs = f != Flavor::kTgi;
  const bool scores = f == Flavor::kVllm || f == Flavor::kSglang;
  for (const DetectorCoverage& d : r.detectors) {
    if (d.name == "trace" || d.name == "kv_events" ||  // no streams given
        (d.name == "logprob_golden" && !logprobs) ||
        (d.name == "prompt_logprobs" && !scores)) {
      EXPECT_EQ(d.state, DetectorState::kDisabled) << d.name;
      EXPECT_FALSE(d.reason.empty()) << d.name;
      continue;
    }
    EXPECT_EQ(d.state, DetectorState::kActive) << d.name << ": " << d.reason;
    for (const auto& [tenant, n] : d.coverage) {
      EXPECT_GE(n, std::min(12, d.floor + 1)) << d.name << " " << tenant;
    }
  }
  EXPECT_EQ(r.limit.source, "advertised") << r.limit.where;
  EXPECT_GT(r.plants.accepted_whole, 0);
  EXPECT_EQ(r.plants.accepted_whole, r.plants.sent);
  EXPECT_GT(r.by_outcome.at("http_4xx"), 0);  // the past-limit refusals
  for (const auto& [d, passed] : r.positive_controls) EXPECT_TRUE(passed) << d;
}

INSTANTIATE_TEST_SUITE_P(Flavors, WellBehavedTest,
                         ::testing::Values(Flavor::kVllm, Flavor::kSglang,
                                           Flavor::kLlamaCpp, Flavor::kTgi),
                         FlavorParamName);

// llama.cpp's slot reuses what each prompt shares with the one before it
// and reports it as cached: the BOS on every cache-busted prompt (and, with
// a constant word before the unique digits, that word too). Such a head is
// no cache hit: the campaign is clean with the latency detector active.
TEST(CampaignTest, ALlamaCppSlotThatReusesTheSharedHeadIsCleanWithLatency) {
  FakeTargetOptions fo = Fake(Flavor::kLlamaCpp);
  fo.slot_prompt_reuse = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "slot-reuse"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  const DetectorCoverage* d = CoverageOf(r, "latency");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->state, DetectorState::kActive) << d->reason;
  EXPECT_GT(target.cached_tokens_served(), 0);
}

// A stream that dies after its headers — TGI's chat stream drops the
// validation error of a prompt past the limit and sends only [DONE] — is
// neither a refusal nor an admission: counted as dropped_stream, never a
// boundary_accepted finding; the campaign is clean.
TEST(CampaignTest, AStreamDroppedAfterItsHeadersIsCountedNotJudged) {
  FakeTargetOptions fo = Fake(Flavor::kTgi);
  fo.stream_errors_dropped = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "dropped-stream"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(Count(r, "boundary_accepted"), 0) << Explain(r);
  ASSERT_TRUE(r.by_outcome.count("dropped_stream")) << Explain(r);
  EXPECT_GT(r.by_outcome.at("dropped_stream"), 0);
  const DetectorCoverage* d = CoverageOf(r, "boundary");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->state, DetectorState::kActive) << d->reason;
  EXPECT_EQ(d->stats["dropped_streams"], r.by_outcome.at("dropped_stream"));
}

// Ollama as it ships: a window (num_ctx) it advertises, and prompts past
// it silently cut. Past-limit probes come back 200 with fewer tokens.
TEST(CampaignTest, OllamaStyleSilentTruncationPastItsWindowIsAFinding) {
  FakeTargetOptions fo = Fake(Flavor::kOllama);
  fo.over_limit = OverLimit::kKeepTail;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "ollama"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.limit.source, "advertised");
  EXPECT_NE(r.limit.where.find("num_ctx"), std::string::npos);
  EXPECT_GT(Count(r, "boundary_accepted"), 0);
  EXPECT_GT(Count(r, "prompt_truncated"), 0);
}

// No limit advertised, and over-long prompts silently cut to their tail:
// the limit is measured, and the cut is a finding.
TEST(CampaignTest, SilentTailKeepingIsAFindingWithTheMeasuredLimit) {
  FakeTargetOptions fo = Fake(Flavor::kOllama);
  fo.advertise_limit = false;
  fo.over_limit = OverLimit::kKeepTail;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r = RunCampaign(Options(target.url(), "tail"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.limit.source, "measured");
  EXPECT_EQ(r.limit.prompt_tokens, 400) << r.limit.where;
  EXPECT_NE(r.limit.where.find("cut from 401"), std::string::npos)
      << r.limit.where;
  EXPECT_GT(Count(r, "prompt_truncated"), 0) << Explain(r);
  bool ladder = false;
  for (const Finding& f : r.findings) {
    ladder = ladder || (f.kind == "prompt_truncated" &&
                        f.group.value("template", "") == "ladder");
  }
  EXPECT_TRUE(ladder);
  // Plants were sized under the measured limit and landed whole.
  EXPECT_GT(r.plants.accepted_whole, 0);
  EXPECT_LE(r.plants.prompt_tokens, 400);
}

// Issue 22 (a): a server that keeps the head and tail of an over-long
// prompt (llama.cpp's context shift) and advertises no limit anywhere (its
// /props hidden behind a gateway). What it reports for a cut prompt varies
// with the prompt's length (a 500-token prompt comes back as about 300):
// the limit is where prompts stop being whole, and no prompt it processed
// whole is called past the limit.
TEST(CampaignTest, HeadAndTailKeepingIsMeasuredToItsTrueLimit) {
  FakeTargetOptions fo = Fake(Flavor::kLlamaCpp);
  fo.advertise_limit = false;
  fo.over_limit = OverLimit::kKeepHeadAndTail;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "head-tail"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.limit.source, "measured") << r.limit.where;
  EXPECT_EQ(r.limit.prompt_tokens, 400) << r.limit.where;
  EXPECT_EQ(r.limit.refuse_above, 400) << r.limit.where;
  EXPECT_NE(r.limit.where.find("both bounds held"), std::string::npos)
      << r.limit.where;
  // Every boundary row is for a prompt the server cut: none for one it
  // processed whole.
  int accepted = 0;
  for (const Finding& f : r.findings) {
    if (f.detector != "boundary") continue;
    const int predicted = f.detail["predicted_prompt_tokens"].get<int>();
    const int reported = f.detail["reported_prompt_tokens"].get<int>();
    EXPECT_GT(predicted, 400) << f.ToJson().dump();
    EXPECT_LT(reported, predicted) << f.ToJson().dump();
    accepted += f.kind == "boundary_accepted";
  }
  EXPECT_GT(accepted, 0);  // past-limit prompts were cut, not refused
  EXPECT_GT(Count(r, "prompt_truncated"), 0);
  // Plants under the measured limit: every one sent came back whole.
  EXPECT_GT(r.plants.accepted_whole, 0);
  EXPECT_EQ(r.plants.accepted_whole, r.plants.sent);
  const DetectorCoverage* latency = CoverageOf(r, "latency");
  ASSERT_NE(latency, nullptr);
  EXPECT_EQ(latency->state, DetectorState::kActive) << latency->reason;
}

// Issue 22 (b): plants the server cuts. Alone every plant is whole; with
// other requests in flight this server's window shrinks to 200 tokens and
// it keeps the head and tail of what is longer. A cut plant is a
// prompt_truncated finding and never coverage: not accepted whole, not an
// answer scanned for the output scan's floor.
TEST(CampaignTest, PlantsCutUnderLoadAreFindingsAndNeverCoverage) {
  FakeTargetOptions fo = Fake(Flavor::kLlamaCpp);
  fo.over_limit = OverLimit::kKeepHeadAndTail;
  fo.busy_limit_tokens = 200;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "plants-cut"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  const DetectorCoverage* scan = CoverageOf(r, "output_scan");
  ASSERT_NE(scan, nullptr);
  const int64_t sent = scan->stats["plants_sent"].get<int64_t>();
  const int64_t whole = scan->stats["plants_whole"].get<int64_t>();
  const int64_t cut = scan->stats["plants_cut"].get<int64_t>();
  EXPECT_GT(cut, 0) << Explain(r);
  EXPECT_EQ(whole + cut, sent);  // every plant answered with a count
  EXPECT_EQ(r.plants.accepted_whole, whole);
  int coverage = 0;
  for (const auto& [tenant, n] : scan->coverage) coverage += n;
  EXPECT_EQ(coverage, whole);
  // A cut plant's answer is not one scanned for the floor.
  EXPECT_LE(scan->stats["answers_scanned"].get<int64_t>(), r.usable - cut);
  int plant_rows = 0;
  for (const Finding& f : r.findings) {
    if (f.group.value("template", "") != "plant") continue;
    ++plant_rows;
    EXPECT_EQ(f.kind, "prompt_truncated");
    EXPECT_LT(f.detail["reported_prompt_tokens"].get<int>(),
              f.detail["predicted_prompt_tokens"].get<int>());
  }
  EXPECT_EQ(plant_rows, cut);
}

// Issue 22 (b), the plants' own calibration: a stated limit (here
// --max-prompt-tokens) the server does not honour. Plants sized to it are
// cut alone: findings, and rebuilt no larger than what was kept, so the
// plants the campaign sends are whole.
TEST(CampaignTest, PlantsCutAloneAreFindingsAndRebuiltSmaller) {
  FakeTargetOptions fo = Fake(Flavor::kLlamaCpp);
  fo.advertise_limit = false;
  fo.over_limit = OverLimit::kKeepHeadAndTail;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "plants-cut-alone");
  o.max_prompt_tokens = 1600;
  const CampaignResult r = RunCampaign(o, &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  const DetectorCoverage* scan = CoverageOf(r, "output_scan");
  ASSERT_NE(scan, nullptr);
  EXPECT_GT(scan->stats["plants_cut_alone"].get<int>(), 0);
  int plant_rows = 0;
  for (const Finding& f : r.findings) {
    plant_rows += f.kind == "prompt_truncated" &&
                  f.group.value("template", "") == "plant";
  }
  EXPECT_EQ(plant_rows, scan->stats["plants_cut_alone"].get<int>());
  EXPECT_GT(r.plants.accepted_whole, 0);
  EXPECT_EQ(r.plants.accepted_whole, r.plants.sent);
  EXPECT_LE(r.plants.prompt_tokens, 400);
}

// (b) Past its limit the server answers a stream with HTTP 200 and an
// error inside it: a refusal, not a boundary_accepted.
TEST(CampaignTest, ErrorsInside200StreamsAreRefusalsAndTheServerIsClean) {
  for (Flavor flavor : {Flavor::kLlamaCpp, Flavor::kVllm}) {
    FakeTargetOptions fo = Fake(flavor);
    fo.over_limit = OverLimit::kErrorInStream;
    FakeTarget target(fo);
    AuditorMetrics metrics;
    const CampaignResult r =
        RunCampaign(Options(target.url(), "stream-errors"), &metrics);
    EXPECT_EQ(r.verdict, Verdict::kClean) << testing::FlavorName(flavor) << "\n"
                                          << Explain(r);
    EXPECT_EQ(Count(r, "boundary_accepted"), 0);
    EXPECT_GT(r.by_kind.at("past_limit"), 0);
  }
}

// (c) A prompt cache shared by every key: calibration requests carry a
// unique prefix each, so the prefill cost is measured, not the cache.
TEST(CampaignTest, SharedPromptCacheDoesNotFoolTheLatencyCalibration) {
  FakeTargetOptions fo = Fake(Flavor::kSglang);
  fo.shared_prompt_cache = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "cache"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  const DetectorCoverage* latency = CoverageOf(r, "latency");
  ASSERT_NE(latency, nullptr);
  const double per_token_us = latency->stats["per_token_us"];
  // The fake's real cost is 250 us a token; a cache would make it ~0.
  EXPECT_GT(per_token_us, 125);
  EXPECT_LT(per_token_us, 500);
  EXPECT_GT(latency->stats["r2"].get<double>(), 0.8);
  // The cache did serve the repeated prompts (golden, echo, plants).
  EXPECT_GT(target.cached_tokens_served(), 0);
}

// A server that cuts an over-long prompt's head (its cache-busting prefix
// with it) and caches per key: a past-limit probe's tail was cached by the
// same tenant's earlier probes, so it is rightly fast. The cut is a
// finding; the speed is not judged (latency.h, CutThenCached).
TEST(CampaignTest, AHeadCuttingCachingServerIsNoLatencyFinding) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  fo.over_limit = OverLimit::kKeepTail;
  fo.per_key_prompt_cache = true;
  fo.report_cached_tokens = true;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "tailcache"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_GT(Count(r, "prompt_truncated"), 0);
  EXPECT_EQ(Count(r, "latency_implausible"), 0) << Explain(r);
  const DetectorCoverage* latency = CoverageOf(r, "latency");
  ASSERT_NE(latency, nullptr);
  EXPECT_GT(latency->stats["cut_then_cached_pairs"].get<int>(), 0)
      << latency->stats.dump();
}

// (d) The target dies mid-campaign: stop early, exit 2, "target down".
TEST(CampaignTest, ATargetThatDiesMidCampaignIsAnErrorNamingIt) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  fo.die_after_completions = 220;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "dies");
  o.max_probes = 0;
  o.duration = absl::Seconds(30);
  const auto start = absl::Now();
  const CampaignResult r = RunCampaign(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_EQ(r.exit_code(), 2);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons[0].find("target down at"), std::string::npos)
      << r.reasons[0];
  // Stopped during the audit, with nothing proven before it.
  EXPECT_TRUE(r.findings.empty()) << Explain(r);
  EXPECT_EQ(r.error, r.reasons[0]);
  EXPECT_EQ(r.ToJson()["error"]["phase"], "audit");
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

// A wrong key for the third of four tenants, on a server whose /v1/models
// needs no key: refused at the start, the tenant named. (The last of four:
// tests/auditor/audits/*, issue 22 (c).)
TEST(CampaignTest, AWrongKeyForAnyTenantIsAnErrorNamingIt) {
  FakeTargetOptions fo = Fake(Flavor::kLlamaCpp);
  fo.api_keys = {{"sk-a", "acme"},
                 {"sk-g", "globex"},
                 {"sk-i", "initech"},
                 {"sk-u", "umbrella"}};
  fo.models_needs_key = false;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "wrong-key");
  o.tenants = {{"acme", "sk-a"},
               {"globex", "sk-g"},
               {"initech", "sk-WRONG"},
               {"umbrella", "sk-u"}};
  const CampaignResult r = RunCampaign(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons[0].find("'initech'"), std::string::npos) << r.reasons[0];
  // Caught by the start checks, before the audit's first probe.
  EXPECT_FALSE(r.audit_started);
  EXPECT_EQ(r.ToJson()["error"]["phase"], "start");
}

// Issue 22 (c): the last of four, before any probe.
TEST(CampaignTest, AWrongKeyForTheLastOfFourTenantsIsAnErrorBeforeAnyProbe) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  fo.api_keys = {{"sk-a", "acme"},
                 {"sk-g", "globex"},
                 {"sk-i", "initech"},
                 {"sk-u", "umbrella"}};
  FakeTarget target(fo);
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "wrong-last-key");
  o.tenants = {{"acme", "sk-a"},
               {"globex", "sk-g"},
               {"initech", "sk-i"},
               {"umbrella", "sk-WRONG"}};
  const CampaignResult r = RunCampaign(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_EQ(r.exit_code(), 2);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(r.reasons[0].find("'umbrella'"), std::string::npos) << r.reasons[0];
  EXPECT_EQ(r.probes, 0);
  EXPECT_EQ(target.completions(), 4);  // one key check per tenant
}

// Issue 22 (d): the base URL as the OpenAI SDKs take it.
TEST(CampaignTest, ABaseUrlEndingInV1Works) {
  FakeTarget target(Fake(Flavor::kLlamaCpp));  // limit in /props, the root
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url() + "/v1/", "v1"), &metrics);
  ASSERT_EQ(r.verdict, Verdict::kClean) << Explain(r);
  EXPECT_EQ(r.limit.source, "advertised");
  EXPECT_NE(r.limit.where.find("/props"), std::string::npos);
  EXPECT_EQ(r.target, target.url());
}

// A key refused mid-run (rotated, revoked): that tenant is not covered,
// and the verdict says so by name.
TEST(CampaignTest, AKeyRefusedMidRunIsInconclusiveNamingTheTenant) {
  FakeTargetOptions fo = Fake(Flavor::kVllm);
  fo.api_keys = {{"sk-a", "acme"}, {"sk-g", "globex"}, {"sk-i", "initech"}};
  fo.revoked_key = "sk-g";
  fo.revoke_after_completions = 200;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "revoked"), &metrics);
  EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  const std::string reasons = absl::StrJoin(r.reasons, "\n");
  EXPECT_NE(reasons.find("globex: "), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("refused (HTTP 401/403)"), std::string::npos);
}

// A trace node that answers and then sends nothing: the trace detector
// is blind, never clean.
TEST(CampaignTest, ATraceNodeThatSendsNothingIsInconclusive) {
  http::Server silent;
  std::atomic<bool> done{false};
  silent.Get("/v1/trace", [&done](const http::Request&, http::Response& res) {
    res.set_chunked_content_provider(
        "text/plain", [&done](size_t, http::DataSink& sink) {
          while (!done.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          sink.done();
          return true;
        });
  });
  const int port = silent.Bind("127.0.0.1", 0).value();
  silent.Start();
  FakeTarget target(Fake(Flavor::kVllm));
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "silent-trace");
  o.trace_urls = {"http://127.0.0.1:" + std::to_string(port)};
  const CampaignResult r = RunCampaign(o, &metrics);
  done = true;
  silent.Stop();
  EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  const DetectorCoverage* trace = CoverageOf(r, "trace");
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ(trace->state, DetectorState::kInconclusive);
  EXPECT_NE(trace->reason.find("0 page reads checked"), std::string::npos)
      << trace->reason;
}

// Too few probes for the floors: inconclusive, naming what fell short.
TEST(CampaignTest, TooFewProbesForTheFloorsIsInconclusive) {
  FakeTarget target(Fake(Flavor::kVllm));
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "short");
  o.max_probes = 30;
  o.floors = {{"", 20}};
  const CampaignResult r = RunCampaign(o, &metrics);
  EXPECT_EQ(r.verdict, Verdict::kInconclusive) << Explain(r);
  EXPECT_EQ(r.exit_code(), 3);
  ASSERT_FALSE(r.reasons.empty());
  EXPECT_NE(absl::StrJoin(r.reasons, "\n").find("below the floor of 20"),
            std::string::npos);
}

// Each detector that judges the campaign's answers, broken on purpose
// (--test-break): its positive control fails, and the verdict is never
// clean. (trace and kv_events, which follow engine streams, have theirs in
// tests/integration/auditor_test.cc and campaign_kv_events_test.cc.)
class BrokenDetectorTest : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> AnswerDetectors() {
  std::vector<std::string> names;
  for (const DetectorRegistry::Entry& e :
       DetectorRegistry::Global().Entries()) {
    if (!e.spec.exercise &&
        (!e.spec.probes.empty() || !e.spec.paired.empty())) {
      names.push_back(e.spec.name);
    }
  }
  return names;
}

TEST_P(BrokenDetectorTest, ItsControlFailsAndTheVerdictIsNotClean) {
  FakeTarget target(Fake(Flavor::kVllm));
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "broken-" + GetParam());
  o.broken = {GetParam()};
  const CampaignResult r = RunCampaign(o, &metrics);
  ASSERT_TRUE(r.positive_controls.count(GetParam())) << Explain(r);
  EXPECT_FALSE(r.positive_controls.at(GetParam()));
  EXPECT_NE(r.verdict, Verdict::kClean) << Explain(r);
  const DetectorCoverage* d = CoverageOf(r, GetParam());
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->state, DetectorState::kInconclusive);
  EXPECT_NE(d->reason.find("positive control failed"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Detectors, BrokenDetectorTest,
                         ::testing::ValuesIn(AnswerDetectors()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(BrokenDetectorListTest, EveryDetectorThatJudgesAnswersIsCovered) {
  const std::vector<std::string> names = AnswerDetectors();
  for (const char* d :
       {"output_scan", "golden", "echo", "boundary", "latency"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), d), names.end()) << d;
  }
}

// The campaign-result document of a real campaign validates against the
// published schema (a real validator: python3-jsonschema), and the JUnit
// file has a case per detector and tenant.
TEST(CampaignReportTest, ResultDocumentValidatesAgainstTheSchema) {
  KVC_REQUIRE_TOOL("python3 -c 'import jsonschema'", "python3-jsonschema");
  FakeTargetOptions fo = Fake(Flavor::kOllama);
  fo.advertise_limit = false;
  fo.over_limit = OverLimit::kKeepTail;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options(target.url(), "schema"), &metrics);
  const std::string doc = ::testing::TempDir() + "/kvcanary-result-" +
                          std::to_string(getpid()) + ".json";
  std::ofstream(doc) << r.ToJson().dump(2);
  const std::string cmd = absl::StrCat(
      "python3 -c 'import json,sys,jsonschema; "
      "s=json.load(open(sys.argv[1])); d=json.load(open(sys.argv[2])); "
      "jsonschema.Draft202012Validator(s).validate(d)' ",
      KVCANARY_SOURCE_DIR, "/docs/campaign-result.schema.json ", doc);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << r.ToJson().dump(2);
  const std::string junit = JunitXml(r.ToJson());
  int cases = 0;
  for (size_t at = junit.find("<testcase"); at != std::string::npos;
       at = junit.find("<testcase", at + 1)) {
    ++cases;
  }
  // A case per registered detector and tenant.
  EXPECT_EQ(cases,
            static_cast<int>(DetectorRegistry::Global().Names().size()) * 3);
  EXPECT_NE(junit.find("prompt_truncated"), std::string::npos);
}

}  // namespace
}  // namespace kvcanary::auditor
