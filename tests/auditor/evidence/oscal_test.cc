// The OSCAL assessment-results document: its structure, and that NIST's
// published JSON Schema accepts it (../shared/schemas/validate.py, which
// needs Debian's python3-jsonschema and python3-regex).
#include "auditor/evidence/oscal.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/auditor/campaign/campaign_records.h"
#include "tests/shared_files.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

const std::string kSchemaDir = shared_files::Path("schemas");

std::vector<Control> RepoControls() {
  auto controls =
      LoadControls(std::string(KVCANARY_SOURCE_DIR) + "/docs/controls.json");
  EXPECT_TRUE(controls.ok()) << controls.status();
  return controls.ok() ? *controls : std::vector<Control>{};
}

int RunShell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Whether NIST's schema and its validator are here. Without the schema
// (../shared/schemas) that is a failure under CI (tests/shared_files.h).
bool ValidatorRuns(const std::string& name) {
  return shared_files::Have(
             {"schemas/validate.py", "schemas/SHA256SUMS",
              "schemas/oscal_assessment-results_schema-1.1.2.json"},
             name + " against NIST's OSCAL schema") &&
         RunShell("python3 -c 'import jsonschema, regex' 2>/dev/null") == 0;
}

// Validates `doc` against the official schema: true when valid; prints
// why and returns true when the validator cannot run here.
bool SchemaAccepts(const json& doc, const std::string& name) {
  if (!ValidatorRuns(name)) {
    std::cout << kSchemaDir << "/validate.py absent, or python3-jsonschema "
              << "or python3-regex missing: " << name
              << " not validated against the OSCAL schema\n";
    return true;
  }
  EXPECT_EQ(
      RunShell("cd " + kSchemaDir + " && sha256sum -c --status SHA256SUMS"), 0)
      << "the OSCAL schema in " << kSchemaDir << " is not NIST's";
  const std::string path = ::testing::TempDir() + "kvcanary_oscal_" +
                           std::to_string(getpid()) + "_" + name + ".json";
  std::ofstream(path) << doc.dump(2);
  const int rc =
      RunShell("python3 " + kSchemaDir + "/validate.py " + kSchemaDir +
               "/oscal_assessment-results_schema-1.1.2.json " + path);
  std::cout << "validate.py " << name << ": exit " << rc << "\n";
  return rc == 0;
}

std::string Prop(const json& obj, const std::string& name) {
  for (const json& p : obj.value("props", json::array())) {
    if (p["name"] == name) return p["value"];
  }
  return "";
}

TEST(OscalTest, FindingsAndCleanCampaignsValidateAgainstNistSchema) {
  const json doc = OscalAssessmentResults({records::FindingsCampaign()},
                                          RepoControls(), records::Context());
  EXPECT_TRUE(SchemaAccepts(doc, "findings"));
  const json clean = OscalAssessmentResults({records::CleanCampaign()},
                                            RepoControls(), records::Context());
  EXPECT_TRUE(SchemaAccepts(clean, "clean"));
  const json both = OscalAssessmentResults(
      {records::FindingsCampaign(), records::CleanCampaign()}, RepoControls(),
      records::Context());
  EXPECT_TRUE(SchemaAccepts(both, "both"));
}

TEST(OscalTest, ValidatorRejectsABrokenDocument) {
  json doc = OscalAssessmentResults({records::FindingsCampaign()},
                                    RepoControls(), records::Context());
  doc["assessment-results"]["results"][0]["findings"][0]["target"]
     ["target-id"] = "I&S-06";  // not an OSCAL token
  if (ValidatorRuns("broken")) {
    EXPECT_FALSE(SchemaAccepts(doc, "broken"));
  }
}

TEST(OscalTest, ErrorCampaignWithoutDetectorsAndEmptyMapValidate) {
  json error = records::Campaign("c-err", "cache-audit", "error");
  error["reasons"] = {"target unreachable"};
  error.erase("ended");
  error["started"] = "not a time";
  const json doc = OscalAssessmentResults({error}, {}, records::Context());
  EXPECT_TRUE(SchemaAccepts(doc, "error"));
  const json& result = doc["assessment-results"]["results"][0];
  ASSERT_EQ(result["observations"].size(), 1u);
  EXPECT_EQ(result["observations"][0]["collected"], "2026-05-31T00:00:00.000Z");
  EXPECT_TRUE(result["reviewed-controls"]["control-selections"][0].contains(
      "include-all"));
  EXPECT_TRUE(SchemaAccepts(OscalAssessmentResults({}, {}, {}), "empty"));
}

TEST(OscalTest, ImportApPointsAtThePlanInBackMatter) {
  const json doc =
      OscalAssessmentResults({records::FindingsCampaign()}, RepoControls(),
                             records::Context())["assessment-results"];
  const std::string href = doc["import-ap"]["href"];
  ASSERT_EQ(href[0], '#');
  const json* plan = nullptr;
  for (const json& r : doc["back-matter"]["resources"]) {
    if (r["uuid"] == href.substr(1)) plan = &r;
  }
  ASSERT_NE(plan, nullptr);
  EXPECT_NE(plan->at("description").get<std::string>().find("acme, globex"),
            std::string::npos);
  EXPECT_EQ(doc["metadata"]["oscal-version"], "1.1.2");
}

TEST(OscalTest, OneObservationPerCampaignAndDetectorWithItsFile) {
  const json doc = OscalAssessmentResults(
      {records::FindingsCampaign(), records::CleanCampaign()}, RepoControls(),
      records::Context())["assessment-results"];
  const json& obs = doc["results"][0]["observations"];
  ASSERT_EQ(obs.size(), 6u);  // 2 campaigns x 3 detectors
  std::set<std::string> keys, resources;
  for (const json& r : doc["back-matter"]["resources"]) {
    resources.insert(r["uuid"].get<std::string>());
  }
  for (const json& o : obs) {
    keys.insert(Prop(o, "campaign") + "/" + Prop(o, "detector"));
    EXPECT_EQ(o["methods"], json::array({"TEST"}));
    EXPECT_EQ(resources.count(o["subjects"][0]["subject-uuid"]), 1u);
    EXPECT_EQ(o["relevant-evidence"][0]["href"].get<std::string>().rfind(
                  "campaigns/", 0),
              0u);
  }
  EXPECT_EQ(keys.size(), 6u);
  EXPECT_EQ(obs[0]["collected"], "2026-05-01T08:05:00.000Z");  // +02:00
}

TEST(OscalTest, IncidentIsNotSatisfiedFindingWithOpenRisk) {
  const json doc = OscalAssessmentResults(
      {records::FindingsCampaign(), records::CleanCampaign()}, RepoControls(),
      records::Context())["assessment-results"];
  const json& result = doc["results"][0];
  const json* incident = nullptr;
  std::map<std::string, std::string> control_state;
  for (const json& f : result["findings"]) {
    if (Prop(f, "incident") == "i-0badc0de") incident = &f;
    if (Prop(f, "answer") != "") {
      control_state[f["target"]["target-id"]] = f["target"]["status"]["state"];
    }
  }
  ASSERT_NE(incident, nullptr);
  EXPECT_EQ(incident->at("target")["status"]["state"], "not-satisfied");
  EXPECT_EQ(incident->at("target")["target-id"], "ccm-ivs-06");
  ASSERT_EQ(result["risks"].size(), 1u);
  EXPECT_EQ(result["risks"][0]["status"], "open");
  EXPECT_EQ(incident->at("related-risks")[0]["risk-uuid"],
            result["risks"][0]["uuid"]);
  EXPECT_EQ(control_state["ccm-ivs-06"], "not-satisfied");
  EXPECT_EQ(control_state["aicm-is-06"], "not-satisfied");
  EXPECT_EQ(control_state.count("iso42001-annex-a"), 0u);  // no id yet

  const json clean = OscalAssessmentResults(
      {records::CleanCampaign()}, RepoControls(),
      records::Context())["assessment-results"]["results"][0];
  EXPECT_FALSE(clean.contains("risks"));
  for (const json& f : clean["findings"]) {
    EXPECT_EQ(f["target"]["status"]["state"], "satisfied") << f.dump();
  }
}

TEST(OscalTest, ClosedCriticalIncidentHasNoRisk) {
  json c = records::FindingsCampaign();
  c["incidents"][0]["status"] = "closed";
  const json result = OscalAssessmentResults(
      {c}, RepoControls(),
      records::Context())["assessment-results"]["results"][0];
  EXPECT_FALSE(result.contains("risks"));
}

TEST(OscalTest, SameExportGivesSameDocumentWithUniqueUuids) {
  const std::vector<json> campaigns = {records::FindingsCampaign(),
                                       records::CleanCampaign()};
  const json a =
      OscalAssessmentResults(campaigns, RepoControls(), records::Context());
  EXPECT_EQ(
      a, OscalAssessmentResults(campaigns, RepoControls(), records::Context()));
  std::set<std::string> uuids;
  size_t count = 0;
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "uuid") {
          uuids.insert(it->get<std::string>());
          ++count;
        }
        walk(*it);
      }
    } else if (j.is_array()) {
      for (const json& v : j) walk(v);
    }
  };
  walk(a);
  EXPECT_EQ(uuids.size(), count);
  EXPECT_GT(count, 10u);
}

TEST(OscalTest, Uuid5MatchesRfc4122) {
  // python3: uuid.uuid5(uuid.UUID("6f1c7a52-1d0e-4b4e-9a7c-3b8e5d2f0a11"),
  // "kvcanary")
  EXPECT_EQ(Uuid5("kvcanary"), "cbd2405a-597c-585d-9118-aac11cef5d00");
}

}  // namespace
}  // namespace kvcanary::auditor
