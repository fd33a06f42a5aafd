// A detector added the way auditor/detectors/registry.h says — one class,
// registered (here for this test's scope only) — runs in a campaign and
// appears in --require and --floor parsing, the detector table, the JSON
// report (valid against the published schema), JUnit and the metrics,
// with no edit anywhere else.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "auditor/campaign/campaign.h"
#include "auditor/detectors/registry.h"
#include "auditor/reports/report.h"
#include "auditor/reports/result_text.h"
#include "gtest/gtest.h"
#include "tests/auditor/fakes/fake_target.h"
#include "tests/shared_files.h"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

// Counts every tenant's usable sniff answers and calls one holding "XYZZY"
// a finding.
class ToyDetector : public DetectorOf<ToyDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "toy_sniffs";
    s.summary = "a sniff answer that says the magic word";
    s.unit = "sniff answers read";
    s.order = 900;
    s.probes = {{ProbeKind::kSniff, 1.0}};
    return s;
  }
  static void JudgeText(const std::string& text, const std::string& tenant,
                        FindingSink& out) {
    if (!absl::StrContains(text, "XYZZY")) return;
    Finding f;
    f.detector = "toy_sniffs";
    f.kind = "magic_word";
    f.reader = tenant;
    out.Add(std::move(f));
  }
  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink& out) override {
    if (p.kind != ProbeKind::kSniff || !c.usable) return;
    read_.Add(p.tenant);
    JudgeText(c.text, tenant_name(p.tenant), out);
  }
  std::vector<ControlCase> Controls() const override {
    return {{"the magic word",
             [](FindingSink& out) { JudgeText("say XYZZY", "t", out); },
             [](const std::vector<Finding>& got) { return got.size() == 1; }}};
  }
  DetectorCoverage Coverage(int) const override {
    DetectorCoverage d;
    d.coverage = read_.Named(view().tenants);
    return d;
  }

 private:
  TenantCounts read_;
};

TEST(ToyDetectorTest, ARegisteredDetectorAppearsEverywhereWithoutOtherEdits) {
  const DetectorRegistration registration(
      ToyDetector::Spec(), [] { return std::make_unique<ToyDetector>(); });
  // The flags.
  ASSERT_TRUE(ParseDetectorList("toy_sniffs,golden").ok());
  auto floors = ParseFloors("12,toy_sniffs=5");
  ASSERT_TRUE(floors.ok()) << floors.status();

  testing::FakeTargetOptions fo;
  fo.flavor = testing::Flavor::kVllm;
  fo.limit_tokens = 400;
  fo.prefill_us_per_token = 250;
  testing::FakeTarget target(fo);
  CampaignOptions o;
  o.target = target.url();
  o.tenants = {{"acme", "sk-a"}, {"globex", "sk-g"}, {"initech", "sk-i"}};
  o.db_path = testing_paths::UniqueTempPath("kvcanary-toy", "campaign.db");
  o.max_probes = 360;
  o.duration = absl::Seconds(60);
  o.progress = false;
  o.floors = *floors;
  o.required = *ParseDetectorList("toy_sniffs,golden");
  AuditorMetrics metrics;
  const CampaignResult r = RunCampaign(o, &metrics);
  const std::string text = ResultText(r, 20);
  ASSERT_EQ(r.verdict, Verdict::kClean) << text;

  // The detector table and the result.
  EXPECT_NE(text.find("toy_sniffs"), std::string::npos) << text;
  EXPECT_TRUE(r.positive_controls.at("toy_sniffs"));
  const nlohmann::json doc = r.ToJson();
  bool in_json = false;
  for (const auto& d : doc["detectors"]) {
    if (d["name"] != "toy_sniffs") continue;
    in_json = true;
    EXPECT_EQ(d["state"], "active");
    EXPECT_EQ(d["floor"], 5);
    EXPECT_EQ(d["required"], true);
    EXPECT_EQ(d["unit"], "sniff answers read");
    EXPECT_GE(d["coverage"]["initech"].get<int>(), 5);
  }
  EXPECT_TRUE(in_json) << doc["detectors"].dump(2);

  // JUnit: a case per tenant.
  const std::string junit = JunitXml(doc);
  EXPECT_NE(junit.find("classname=\"kvcanary.toy_sniffs\" name=\"initech\""),
            std::string::npos)
      << junit;

  // The metrics' labels.
  const std::string m = metrics.Serialize();
  EXPECT_NE(
      m.find("kvcanary_auditor_detector_coverage{detector=\"toy_sniffs\"}"),
      std::string::npos)
      << m;
  EXPECT_NE(
      m.find("kvcanary_auditor_positive_control{detector=\"toy_sniffs\"} 1"),
      std::string::npos)
      << m;

  // The document validates against the published schema.
  KVC_REQUIRE_TOOL("python3 -c 'import jsonschema'", "python3-jsonschema");
  const std::string path = o.db_path + ".json";
  std::ofstream(path) << doc.dump(2);
  const std::string cmd = absl::StrCat(
      "python3 -c 'import json,sys,jsonschema; "
      "s=json.load(open(sys.argv[1])); d=json.load(open(sys.argv[2])); "
      "jsonschema.Draft202012Validator(s).validate(d)' ",
      KVCANARY_SOURCE_DIR, "/docs/campaign-result.schema.json ", path);
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace kvcanary::auditor
