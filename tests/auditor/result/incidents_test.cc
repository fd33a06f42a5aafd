// Findings grouped into incidents: whose data, read by whom, where.
#include "auditor/result/incidents.h"

#include <regex>
#include <sstream>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

Finding TraceRead(const std::string& reader, const std::string& writer,
                  uint64_t request, uint64_t page, int64_t ts) {
  Finding f;
  f.detector = "trace";
  f.kind = "trace_foreign_tenant_read";
  f.severity = Severity::kCritical;
  f.reader = reader;
  f.writer = writer;
  f.engine_request = request;
  f.ts_us = ts;
  f.group = {{"node", "decode"}};
  f.detail = {{"page", page}};
  return f;
}

Finding Boundary(const std::string& tenant, uint64_t request, int64_t probe) {
  Finding f;
  f.detector = "boundary";
  f.kind = "boundary_accepted";
  f.severity = Severity::kHigh;
  f.reader = tenant;
  f.engine_request = request;
  f.probe = probe;
  f.ts_us = 5;
  f.group = {{"template", "past_limit"}};
  return f;
}

TEST(IncidentsTest, PageRowsOfOneReaderWriterPairAreOneIncident) {
  std::vector<Finding> rows;
  for (uint64_t page = 0; page < 40; ++page) {
    rows.push_back(TraceRead("acme", "globex", 100 + page % 4, page,
                             1000 + static_cast<int64_t>(page)));
  }
  rows.push_back(TraceRead("acme", "initech", 200, 7, 2000));
  const auto incidents = GroupIncidents("c1", rows);
  ASSERT_EQ(incidents.size(), 2u);
  const Incident& i = incidents[0];
  EXPECT_EQ(i.writer, "globex");
  EXPECT_EQ(i.reader, "acme");
  EXPECT_EQ(i.rows, 40);
  EXPECT_EQ(i.requests.size(), 4u);
  EXPECT_EQ(i.pages.size(), 40u);
  EXPECT_EQ(i.first_seen_us, 1000);
  EXPECT_EQ(i.last_seen_us, 1039);
  EXPECT_EQ(i.severity, Severity::kCritical);
  EXPECT_EQ(i.tenants, (std::set<std::string>{"acme", "globex"}));
  EXPECT_EQ(i.id.rfind("i-", 0), 0u);
  // Stable ids: the same campaign and key give the same id.
  EXPECT_EQ(GroupIncidents("c1", rows)[0].id, i.id);
  EXPECT_NE(GroupIncidents("c2", rows)[0].id, i.id);
}

TEST(IncidentsTest,
     BlackBoxFindingsTakeTheirWritersFromTheTraceOfTheirRequest) {
  std::vector<Finding> rows = {TraceRead("acme", "globex", 7, 1, 1),
                               TraceRead("acme", "initech", 7, 2, 1),
                               Boundary("acme", 7, 3), Boundary("acme", 9, 4)};
  JoinWriters(&rows);
  EXPECT_EQ(rows[2].writer, "globex,initech");
  EXPECT_TRUE(rows[2].writer_joined);
  EXPECT_EQ(rows[3].writer, "");
  const auto incidents = GroupIncidents("c", rows);
  // Two trace incidents, one boundary incident for both probes.
  ASSERT_EQ(incidents.size(), 3u);
  const Incident* b = nullptr;
  for (const Incident& i : incidents) {
    if (i.detector == "boundary") b = &i;
  }
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->rows, 2);
  EXPECT_EQ(b->writer, "globex,initech");
  EXPECT_EQ(b->probes, (std::set<int64_t>{3, 4}));
}

TEST(IncidentsTest, RoundTripsThroughJson) {
  const auto incidents = GroupIncidents(
      "c", {TraceRead("acme", "globex", 7, 1, 1700000000000000)});
  const Incident back = Incident::FromJson(incidents[0].ToJson());
  EXPECT_EQ(back.id, incidents[0].id);
  EXPECT_EQ(back.writer, "globex");
  EXPECT_EQ(back.rows, 1);
  EXPECT_EQ(back.pages, incidents[0].pages);
  EXPECT_EQ(incidents[0].ToJson()["first_seen"], "2023-11-14T22:13:20.000Z");
}

TEST(IncidentsTest, TableIsCappedNeverCutAndWriterFirst) {
  std::vector<Finding> rows;
  for (int r = 0; r < 60; ++r) {
    rows.push_back(TraceRead("reader-with-a-long-name-" + std::to_string(r),
                             "globex", 1, 1, 1));
  }
  const std::string table = IncidentTable(GroupIncidents("c", rows), 50);
  int lines = 0;
  for (char c : table) lines += c == '\n';
  EXPECT_EQ(lines, 1 + 50 + 1) << table;  // header, 50, "and 10 more"
  EXPECT_EQ(table.rfind("WRITER", 0), 0u);
  EXPECT_NE(table.find("and 10 more"), std::string::npos);
  // Every shown reader name whole, followed by the column gap.
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // header
  for (int n = 0; n < 50 && std::getline(in, line); ++n) {
    EXPECT_TRUE(std::regex_search(line, std::regex("reader-with-a-long-name-"
                                                   "[0-9]+  ")))
        << line;
  }
  EXPECT_EQ(table.find("..."), table.find("... and 10 more"));
}

}  // namespace
}  // namespace kvcanary::auditor
