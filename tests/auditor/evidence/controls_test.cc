// The control map (docs/controls.json) and the answer sheets per control.
#include "auditor/evidence/controls.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/auditor/campaign/campaign_records.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

std::vector<Control> RepoControls() {
  auto controls =
      LoadControls(std::string(KVCANARY_SOURCE_DIR) + "/docs/controls.json");
  EXPECT_TRUE(controls.ok()) << controls.status();
  return controls.ok() ? *controls : std::vector<Control>{};
}

const Control& Find(const std::vector<Control>& controls,
                    const std::string& oscal_id) {
  for (const Control& c : controls) {
    if (c.oscal_id == oscal_id) return c;
  }
  static const Control kNone;
  ADD_FAILURE() << "no control " << oscal_id;
  return kNone;
}

TEST(ControlsTest, RepoMapHasCcmAicmAndLicensedRowsLeftEmpty) {
  const std::vector<Control> controls = RepoControls();
  const Control& ivs = Find(controls, "ccm-ivs-06");
  EXPECT_EQ(ivs.id, "IVS-06");
  EXPECT_EQ(ivs.title, "Segmentation and Segregation");
  EXPECT_EQ(Find(controls, "aicm-is-06").id, "I&S-06");
  for (const Control& c : controls) {
    EXPECT_TRUE(IsOscalToken(c.oscal_id)) << c.oscal_id;
    EXPECT_FALSE(c.evidence.empty()) << c.oscal_id;
    if (c.licensed) {
      EXPECT_EQ(c.title, "") << c.oscal_id;
      EXPECT_EQ(c.summary, "") << c.oscal_id;
    }
  }
  const Control& sig = Find(controls, "sig-n-2");
  EXPECT_EQ(sig.maps_to, "ccm-ivs-06");
  EXPECT_EQ(sig.evidence.size(), ivs.evidence.size());
  for (const char* cmd :
       {"probe", "accept", "cache-audit", "facts", "forensics"}) {
    bool mapped = false;
    for (const ControlEvidence& e : ivs.evidence) mapped |= e.command == cmd;
    EXPECT_TRUE(mapped) << cmd;
  }
  EXPECT_TRUE(ControlCovers(ivs, "probe", "output_scan"));
  EXPECT_TRUE(ControlCovers(ivs, "facts", "exposure"));
  EXPECT_FALSE(ControlCovers(ivs, "probe", "latency"));
}

TEST(ControlsTest, BadMapsAreRejectedNamingTheRow) {
  EXPECT_FALSE(ParseControls("not json").ok());
  auto bad = ParseControls(R"({"controls":[{"oscal_id":"I&S-06"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("controls[0]"), std::string::npos);
  EXPECT_FALSE(
      ParseControls(R"({"controls":[{"oscal_id":"a"},{"oscal_id":"a"}]})")
          .ok());
  EXPECT_FALSE(
      ParseControls(R"({"controls":[{"oscal_id":"a","maps_to":"b"}]})").ok());
  EXPECT_FALSE(LoadControls("/nonexistent/controls.json").ok());
}

TEST(ControlsTest, CsvFieldQuotesPerRfc4180AndDefusesFormulas) {
  EXPECT_EQ(CsvField("plain"), "plain");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
  EXPECT_EQ(CsvField("@sum"), "'@sum");
  EXPECT_EQ(CsvField(""), "");
}

TEST(ControlsTest, CleanCampaignAnswersYesTested) {
  const auto controls = RepoControls();
  const ControlAssessment a =
      AssessControl(Find(controls, "ccm-ivs-06"), {records::CleanCampaign()});
  EXPECT_EQ(a.answer, Answer::kYesTested) << a.why;
  EXPECT_EQ(a.campaigns, std::vector<size_t>{0});
}

TEST(ControlsTest, OpenIncidentMakesTheAnswerNotYes) {
  const auto controls = RepoControls();
  const Control& ivs = Find(controls, "ccm-ivs-06");
  const ControlAssessment a = AssessControl(
      ivs, {records::CleanCampaign(), records::FindingsCampaign()});
  EXPECT_EQ(a.answer, Answer::kNoFindingsOpen) << a.why;
  json closed = records::FindingsCampaign();
  closed["incidents"][0]["status"] = "closed";
  EXPECT_EQ(AssessControl(ivs, {closed}).answer, Answer::kYesTested);
}

TEST(ControlsTest, InconclusiveOrBelowFloorIsPartial) {
  const auto controls = RepoControls();
  json c = records::CleanCampaign();
  c["verdict"] = "inconclusive";
  c["detectors"][1] = records::Detector("trace", 3, 40);  // acme below 20
  const ControlAssessment a = AssessControl(Find(controls, "ccm-ivs-06"), {c});
  EXPECT_EQ(a.answer, Answer::kPartially);
  EXPECT_NE(a.why.find("trace inconclusive"), std::string::npos) << a.why;
}

TEST(ControlsTest, ControlWithoutCampaignsHasNoEvidence) {
  const auto controls = RepoControls();
  EXPECT_EQ(AssessControl(Find(controls, "ccm-ivs-06"), {}).answer,
            Answer::kNoEvidence);
  Control unmapped;
  unmapped.id = "X-1";
  unmapped.oscal_id = "x-1";
  const auto sheets =
      AnswerSheets({records::CleanCampaign()}, {unmapped}, records::Context());
  ASSERT_EQ(sheets.count("answers/x-1.csv"), 1u);
  EXPECT_NE(sheets.at("answers/x-1.csv").find("answer,No evidence,"),
            std::string::npos)
      << sheets.at("answers/x-1.csv");
}

TEST(ControlsTest, SheetsCarryAnswerPeriodCoverageIncidentsAndReferences) {
  const auto sheets =
      AnswerSheets({records::FindingsCampaign(), records::CleanCampaign()},
                   RepoControls(), records::Context());
  // CCM, AICM and SIG; the ISO row has no id yet.
  EXPECT_EQ(sheets.size(), 6u);
  ASSERT_EQ(sheets.count("answers/ccm-ivs-06.md"), 1u);
  const std::string& csv = sheets.at("answers/ccm-ivs-06.csv");
  EXPECT_EQ(csv.rfind("section,item,value,reference\r\n", 0), 0u);
  EXPECT_NE(csv.find("answer,\"No, findings open\""), std::string::npos);
  EXPECT_NE(csv.find("period,2026-05-01T00:00:00Z,2026-05-31T00:00:00Z"),
            std::string::npos);
  EXPECT_NE(csv.find("\"active; floor 20; coverage acme 31, globex 33\""),
            std::string::npos);
  EXPECT_NE(csv.find("open_incident,i-0badc0de,\"critical foreign_marker "
                     "globex -> acme, 3 rows\",campaigns/c20260501-a.json"),
            std::string::npos);
  EXPECT_NE(csv.find("evidence_rows,c20260501-a,12..13 40"), std::string::npos);
  EXPECT_NE(csv.find("checkpoint,kvcanary/test-host"), std::string::npos);
  const std::string& md = sheets.at("answers/ccm-ivs-06.md");
  EXPECT_NE(md.find("**Answer: No, findings open**"), std::string::npos);
  EXPECT_NE(md.find("`campaigns/c20260502-b.json`"), std::string::npos);
  EXPECT_NE(sheets.at("answers/sig-n-2.md").find("Licensed framework"),
            std::string::npos);
}

TEST(ControlsTest, MarkdownEscapesPipesFromTheRecords) {
  json c = records::CleanCampaign();
  c["target"] = "http://x|y";
  const auto sheets = AnswerSheets({c}, RepoControls(), records::Context());
  const std::string& md = sheets.at("answers/ccm-ivs-06.md");
  EXPECT_NE(md.find("x\\|y"), std::string::npos);
  EXPECT_EQ(md.find("x|y"), std::string::npos);
}

}  // namespace
}  // namespace kvcanary::auditor
