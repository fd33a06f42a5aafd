// A campaign that ends in an error: before the audit's first probe (exit 2
// whatever else), or after it had proven findings (exit 1, the error beside
// them: "died after proving a leak" is not "never started"). The targets are
// scripted fakes (tests/auditor/fakes/fake_target.h).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/campaign/campaign.h"
#include "auditor/reports/result_text.h"
#include "auditor/trace/canned_trace.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"
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

std::string Db(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-campaign-error", name + ".db");
}

CampaignOptions Options(const std::string& target, const std::string& name) {
  CampaignOptions o;
  o.target = target;
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}, {"initech", "sk-i"}};
  o.db_path = Db(name);
  o.max_probes = 0;  // until the target dies (or the duration)
  o.duration = absl::Seconds(30);
  o.concurrency = 8;
  o.progress = false;
  o.floors = {{"", 12}};
  return o;
}

std::string Explain(const CampaignResult& r) {
  return absl::StrCat(VerdictName(r.verdict), ": ",
                      absl::StrJoin(r.reasons, "; "), " | error: ", r.error);
}

// The value of the unlabelled sample `name` in a /metrics text; -1 if
// absent.
double Sample(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::atof(metrics.c_str() + at + name.size() + 2);
}

// Validates `doc` against docs/campaign-result.schema.json with
// python3-jsonschema: 0 valid, 1 invalid, -1 no validator.
int ValidateAgainstSchema(const json& doc) {
  if (std::system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) {
    return -1;
  }
  const std::string path = ::testing::TempDir() + "/kvcanary-error-result-" +
                           std::to_string(getpid()) + ".json";
  std::ofstream(path) << doc.dump(2);
  const std::string cmd = absl::StrCat(
      "python3 -c 'import json,sys,jsonschema; "
      "s=json.load(open(sys.argv[1])); d=json.load(open(sys.argv[2])); "
      "jsonschema.Draft202012Validator(s).validate(d)' ",
      KVCANARY_SOURCE_DIR, "/docs/campaign-result.schema.json ", path,
      " >/dev/null 2>&1");
  return std::system(cmd.c_str()) == 0 ? 0 : 1;
}

// (e) A server that keeps the tail of an over-long prompt, answers 200 and
// reports the cut count, then dies once it has cut four prompts: the
// campaign proves the cut before it, and stops on "target down". Findings
// (exit 1), the error printed beside them and in the JSON's `error`, every
// finding already in the evidence, and no "success" for the stale alert.
TEST(CampaignErrorTest, ATargetKilledAfterFindingsIsFindingsWithTheError) {
  FakeTargetOptions fo;
  fo.flavor = Flavor::kOllama;
  fo.limit_tokens = 400;
  fo.prefill_us_per_token = 250;
  fo.over_limit = OverLimit::kKeepTail;
  fo.die_after_truncations = 4;
  FakeTarget target(fo);
  AuditorMetrics metrics;
  const auto start = absl::Now();
  const CampaignResult r =
      RunCampaign(Options(target.url(), "killed"), &metrics);
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
  ASSERT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_TRUE(r.audit_started);
  EXPECT_NE(r.error.find("target down at"), std::string::npos) << r.error;
  std::set<std::string> kinds;
  for (const Finding& f : r.findings) kinds.insert(f.kind);
  EXPECT_TRUE(kinds.count("prompt_truncated")) << absl::StrJoin(kinds, ",");
  EXPECT_FALSE(r.incidents.empty());

  // Printed: the verdict, then the error beside the findings.
  const std::string text = ResultText(r, 50);
  EXPECT_NE(text.find(": findings (exit 1)"), std::string::npos) << text;
  EXPECT_NE(text.find("error: target down at"), std::string::npos) << text;

  // In the JSON, beside the verdict.
  const json doc = r.ToJson();
  EXPECT_EQ(doc["verdict"], "findings");
  EXPECT_EQ(doc["exit_code"], 1);
  ASSERT_TRUE(doc["error"].is_object()) << doc["error"].dump();
  EXPECT_EQ(doc["error"]["message"], r.error);
  EXPECT_EQ(doc["error"]["phase"], "audit");
  const int valid = ValidateAgainstSchema(doc);
  if (valid >= 0 || shared_files::Required()) {
    EXPECT_EQ(valid, 0) << doc.dump(2) << " (-1: no python3-jsonschema)";
  }

  // Durable: every finding was appended as it was made, and the end says
  // why the campaign stopped.
  auto store = storage::EvidenceStore::OpenReadOnly(r.db_path);
  ASSERT_TRUE(store.ok()) << store.status();
  storage::EvidenceFilter filter;
  filter.campaign = r.campaign_id;
  filter.kind = "finding";
  auto rows = (*store)->Query(filter);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), r.findings.size());
  filter.kind = "campaign_end";
  auto end = (*store)->Query(filter);
  ASSERT_TRUE(end.ok() && end->size() == 1u);
  EXPECT_EQ((*end)[0].record.body["verdict"], "findings");
  EXPECT_EQ((*end)[0].record.body["error"]["message"], r.error);

  // The run did not finish: no success for KvcanaryAuditStale, though
  // the verdict is findings.
  const std::string m = metrics.Serialize();
  EXPECT_EQ(Sample(m, "kvcanary_auditor_last_success_timestamp_seconds"), 0)
      << m;
  EXPECT_NE(m.find("kvcanary_auditor_last_verdict{verdict=\"findings\"} 1"),
            std::string::npos)
      << m;
}

// A target with nothing listening: caught by the start checks, before the
// audit's first probe. Exit 2, phase "start", nothing probed.
TEST(CampaignErrorTest, AnUnreachableTargetIsAnErrorBeforeTheFirstProbe) {
  AuditorMetrics metrics;
  const CampaignResult r =
      RunCampaign(Options("http://127.0.0.1:1", "unreachable"), &metrics);
  EXPECT_EQ(r.verdict, Verdict::kError) << Explain(r);
  EXPECT_EQ(r.exit_code(), 2);
  EXPECT_FALSE(r.audit_started);
  EXPECT_FALSE(r.error.empty());
  EXPECT_EQ(r.probes, 0);
  const json doc = r.ToJson();
  ASSERT_TRUE(doc["error"].is_object());
  EXPECT_EQ(doc["error"]["phase"], "start");
  EXPECT_EQ(doc["reasons"][0], r.error);
  EXPECT_EQ(Sample(metrics.Serialize(),
                   "kvcanary_auditor_last_success_timestamp_seconds"),
            0);
}

// A trace node that streamed another tenant's page being read, then a
// target that dies during the calibration: the trace detector's finding,
// proven before the target died, is kept (findings, exit 1) with the error
// beside it — the detectors that only read still finish after an error.
TEST(CampaignErrorTest, ATraceFindingMadeBeforeTheTargetDiedIsKept) {
  std::atomic<bool> done{false};
  http::Server node;
  node.Get("/v1/trace", [&done](const http::Request&, http::Response& res) {
    res.set_chunked_content_provider(
        "text/plain", [&done](size_t offset, http::DataSink& sink) {
          if (offset == 0)
            sink.write(kCannedForeignRead, sizeof(kCannedForeignRead) - 1);
          while (!done.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          sink.done();
          return true;
        });
  });
  const int port = node.Bind("127.0.0.1", 0).value();
  node.Start();
  FakeTargetOptions fo;
  fo.flavor = Flavor::kVllm;
  fo.limit_tokens = 400;
  FakeTarget target(fo);
  // Killed once the keys are checked and calibration has begun.
  std::thread killer([&] {
    while (target.completions() < 8 && !done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    target.Stop();
  });
  AuditorMetrics metrics;
  CampaignOptions o = Options(target.url(), "trace-then-died");
  o.trace_urls = {"http://127.0.0.1:" + std::to_string(port)};
  o.max_consecutive_failures = 3;
  const CampaignResult r = RunCampaign(o, &metrics);
  done = true;
  killer.join();
  node.Stop();
  int foreign = 0;
  for (const Finding& f : r.findings) {
    foreign += f.kind == "trace_foreign_tenant_read";
  }
  EXPECT_GE(foreign, 1) << Explain(r);
  EXPECT_EQ(r.verdict, Verdict::kFindings) << Explain(r);
  EXPECT_NE(r.error.find("target down"), std::string::npos) << Explain(r);
}

}  // namespace
}  // namespace kvcanary::auditor
