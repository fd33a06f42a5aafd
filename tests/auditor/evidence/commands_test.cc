// `findings` on a real evidence database: raw rows with the token counts
// that explain a boundary row, and incidents grouped by cause across
// tenants for a campaign that stopped on an error after its findings.
#include "auditor/evidence/commands.h"

#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include "auditor/evidence/log.h"
#include "auditor/result/finding.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/temp_path.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

std::string Db(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-commands", name + ".db");
}

Finding Cut(const std::string& kind, const std::string& tenant, int64_t probe,
            int sent, int reported, int limit) {
  Finding f;
  f.detector = "boundary";
  f.kind = kind;
  f.severity = Severity::kHigh;
  f.reader = tenant;
  f.probe = probe;
  f.ts_us = 1700000000000000 + probe;
  f.group = {{"template", "past_limit"}};
  f.detail = {{"tenant", tenant},
              {"template", "past_limit"},
              {"predicted_prompt_tokens", sent},
              {"limit", limit},
              {"reported_prompt_tokens", reported},
              {"http_status", 200},
              {"probe", probe}};
  return f;
}

// A campaign whose target cut every past-limit prompt of four tenants to
// 102 tokens and then died: its rows, and its end with the error. No
// `incident` rows: `findings` groups them on the spot.
std::string WriteCampaign(const std::string& campaign) {
  const std::string db = Db("cut");
  auto log = EvidenceLog::Open(db, campaign);
  EXPECT_TRUE(log.ok()) << log.status();
  EXPECT_TRUE((*log)->Record("campaign_start", {{"command", "probe"}}).ok());
  int64_t probe = 0;
  for (const char* t : {"acme", "globex", "initech", "umbrella"}) {
    for (const char* kind : {"boundary_accepted", "prompt_truncated"}) {
      EXPECT_TRUE(
          (*log)
              ->Record("finding", Cut(kind, t, probe, 166, 102, 102).ToJson())
              .ok());
    }
    ++probe;
  }
  Finding echo;
  echo.detector = "echo";
  echo.kind = "echo_failure";
  echo.reader = "acme";
  echo.probe = 40;
  EXPECT_TRUE((*log)->Record("finding", echo.ToJson()).ok());
  EXPECT_TRUE((*log)
                  ->Record("campaign_end",
                           {{"verdict", "findings"},
                            {"exit_code", 1},
                            {"error",
                             {{"message", "target down at 10:15:02"},
                              {"phase", "audit"}}}},
                           true)
                  .ok());
  return db;
}

std::string RunFindings(const FindingsOptions& o, int* rc) {
  ::testing::internal::CaptureStdout();
  *rc = FindingsCommand(o);
  return ::testing::internal::GetCapturedStdout();
}

TEST(FindingsCommandTest, RowsShowTheTokensSentAndReportedOfBoundaryRows) {
  FindingsOptions o;
  o.db = WriteCampaign("c20261203T101500-1a2b3c4d");
  o.rows = true;
  int rc = -1;
  const std::string out = RunFindings(o, &rc);
  EXPECT_EQ(rc, 0);
  std::istringstream in(out);
  std::string header;
  std::getline(in, header);
  for (const char* column : {"SENT", "REPORTED", "LIMIT"}) {
    EXPECT_NE(header.find(column), std::string::npos) << header;
  }
  int boundary = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.size() < 12) continue;  // the count line
    // SEQ CAMPAIGN KIND SEVERITY DETECTOR WRITER READER PROBE SENT REPORTED
    // LIMIT ENGINE_REQUEST/PAGE
    if (w[4] == "boundary") {
      ++boundary;
      EXPECT_EQ(w[8], "166") << line;
      EXPECT_EQ(w[9], "102") << line;
      EXPECT_EQ(w[10], "102") << line;
    } else {
      EXPECT_EQ(w[8], "-") << line;  // echo: no token counts
      EXPECT_EQ(w[9], "-") << line;
    }
  }
  EXPECT_EQ(boundary, 8) << out;
  EXPECT_NE(out.find("9 finding rows"), std::string::npos) << out;
}

TEST(FindingsCommandTest, IncidentsAreOnePerCauseWithTheErrorBesideTheVerdict) {
  FindingsOptions o;
  o.db = WriteCampaign("c20261203T101500-1a2b3c4d");
  int rc = -1;
  const std::string out = RunFindings(o, &rc);
  EXPECT_EQ(rc, 0);
  // The boundary rows of four tenants: one incident; echo: another.
  EXPECT_NE(out.find("findings (error: target down at 10:15:02), 2 incidents"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("acme,globex,initech,umbrella"), std::string::npos) << out;
  EXPECT_NE(out.find("cut_past_limit"), std::string::npos) << out;

  o.format = "json";
  const json doc = json::parse(RunFindings(o, &rc));
  ASSERT_EQ(doc.size(), 1u);
  EXPECT_EQ(doc[0]["error"]["message"], "target down at 10:15:02");
  ASSERT_EQ(doc[0]["incidents"].size(), 2u);
  const json& cut = doc[0]["incidents"][0];
  EXPECT_EQ(cut["kind"], "prompt_truncated");
  EXPECT_EQ(cut["rows"], 8);
  EXPECT_EQ(cut["kinds"],
            json({{"boundary_accepted", 4}, {"prompt_truncated", 4}}));
  EXPECT_EQ(cut["tenants"].size(), 4u);
}

}  // namespace
}  // namespace kvcanary::auditor
