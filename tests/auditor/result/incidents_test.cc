// Findings grouped into incidents: whose data, read by whom, where.
#include "auditor/result/incidents.h"

#include <algorithm>
#include <random>
#include <regex>
#include <sstream>

#include "common/sha256.h"
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

// A boundary row as JudgeBoundary makes it (auditor/detectors/boundary.cc).
Finding BoundaryRow(const std::string& kind, const std::string& tenant,
                    const std::string& tmpl, int64_t probe, int predicted,
                    int reported, int limit) {
  Finding f = Boundary(tenant, 0, probe);
  f.kind = kind;
  f.group = {{"template", tmpl}};
  f.detail = {{"tenant", tenant},
              {"template", tmpl},
              {"predicted_prompt_tokens", predicted},
              {"limit", limit},
              {"reported_prompt_tokens", reported},
              {"http_status", 200}};
  return f;
}

Finding Latency(const std::string& tenant, int64_t probe) {
  Finding f;
  f.detector = "latency";
  f.kind = "latency_implausible";
  f.severity = Severity::kMedium;
  f.reader = tenant;
  f.probe = probe;
  f.ts_us = 9;
  f.group = {{"template", "past_limit"}};
  return f;
}

const Incident* Find(const std::vector<Incident>& incidents,
                     const std::string& detector) {
  for (const Incident& i : incidents) {
    if (i.detector == detector) return &i;
  }
  return nullptr;
}

const std::vector<std::string> kFour = {"acme", "globex", "initech",
                                        "umbrella"};

// One server that cuts every over-long prompt to its last 102 tokens, seen
// by four tenants: the ladder's cut, then each past-limit probe's two rows
// (answered past the limit, and cut) and a first token too fast for its
// prompt. One incident per cause, the tenants inside — not one per tenant,
// kind and template (13 before).
TEST(IncidentsTest, OneServerWideTruncationSeenByFourTenantsIsOneIncident) {
  std::vector<Finding> rows = {
      BoundaryRow("prompt_truncated", "acme", "ladder", -1, 166, 102, 0)};
  int64_t probe = 10;
  for (int round = 0; round < 3; ++round) {
    for (const std::string& t : kFour) {
      rows.push_back(BoundaryRow("boundary_accepted", t, "past_limit", probe,
                                 130, 102, 102));
      rows.push_back(BoundaryRow("prompt_truncated", t, "past_limit", probe,
                                 130, 102, 102));
      rows.push_back(Latency(t, probe));
      ++probe;
    }
  }
  const auto incidents = GroupIncidents("c1", rows);
  ASSERT_EQ(incidents.size(), 2u) << IncidentTable(incidents, 20);
  const Incident* b = Find(incidents, "boundary");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->kind, "prompt_truncated");
  EXPECT_EQ(b->key, nlohmann::json({{"cause", "cut_past_limit"}}));
  EXPECT_EQ(b->rows, 25);
  EXPECT_EQ(b->kinds,
            (std::map<std::string, int64_t>{{"boundary_accepted", 12},
                                            {"prompt_truncated", 13}}));
  EXPECT_EQ(b->tenants, std::set<std::string>(kFour.begin(), kFour.end()));
  EXPECT_EQ(b->reader, "acme,globex,initech,umbrella");
  EXPECT_EQ(b->writer, "");
  EXPECT_EQ(b->probes.size(), 12u);
  EXPECT_NE(b->Summary().find("12 x boundary accepted + 13 x prompt truncated"),
            std::string::npos)
      << b->Summary();
  const Incident* l = Find(incidents, "latency");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->rows, 12);
  EXPECT_EQ(l->tenants.size(), 4u);
  EXPECT_EQ(l->key, nlohmann::json({{"template", "past_limit"}}));
  // The table names every tenant as a reader.
  EXPECT_NE(IncidentTable(incidents, 20).find("acme,globex,initech,umbrella"),
            std::string::npos);
}

// Different causes stay apart: a plant cut within the limit (the prompt
// was nothing past any limit), a prompt past the limit answered whole, a
// count larger than sent.
TEST(IncidentsTest, BoundaryRowsOfDifferentCausesAreDifferentIncidents) {
  const std::vector<Finding> rows = {
      BoundaryRow("prompt_truncated", "acme", "plant", 1, 300, 97, 0),
      BoundaryRow("prompt_truncated", "globex", "plant", 2, 300, 66, 0),
      BoundaryRow("prompt_truncated", "acme", "at_limit", 3, 400, 350, 400),
      BoundaryRow("boundary_accepted", "acme", "past_limit", 4, 450, 450, 400),
      BoundaryRow("boundary_accepted", "globex", "past_limit", 5, 450, -1, 400),
      BoundaryRow("prompt_tokens_mismatch", "initech", "at_limit", 6, 400, 420,
                  400)};
  const auto incidents = GroupIncidents("c", rows);
  std::map<std::string, const Incident*> by_cause;
  for (const Incident& i : incidents) {
    by_cause[i.key.value("cause", "")] = &i;
  }
  ASSERT_EQ(incidents.size(), 3u) << IncidentTable(incidents, 20);
  ASSERT_TRUE(by_cause.count("cut_within_limit"));
  EXPECT_EQ(by_cause["cut_within_limit"]->kind, "prompt_truncated");
  EXPECT_EQ(by_cause["cut_within_limit"]->rows, 3);
  EXPECT_EQ(by_cause["cut_within_limit"]->tenants,
            (std::set<std::string>{"acme", "globex"}));
  ASSERT_TRUE(by_cause.count("accepted_past_limit"));
  EXPECT_EQ(by_cause["accepted_past_limit"]->kind, "boundary_accepted");
  EXPECT_EQ(by_cause["accepted_past_limit"]->rows, 2);
  ASSERT_TRUE(by_cause.count("prompt_tokens_mismatch"));
  EXPECT_EQ(by_cause["prompt_tokens_mismatch"]->reader, "initech");
}

// Golden, echo: one incident per variant (golden) or per kind (echo),
// whoever saw it; a leak keeps one incident per reader and marker owner.
TEST(IncidentsTest, GoldenAndEchoGroupAcrossTenantsLeaksByReaderAndWriter) {
  std::vector<Finding> rows;
  for (const std::string& t : {"acme", "globex"}) {
    for (int variant : {0, 1}) {
      Finding g;
      g.detector = "golden";
      g.kind = "golden_mismatch";
      g.reader = t;
      g.group = {{"variant", variant}};
      rows.push_back(g);
    }
  }
  for (const std::string& t : kFour) {
    Finding e;
    e.detector = "echo";
    e.kind = "echo_failure";
    e.reader = t;
    rows.push_back(e);
  }
  for (const std::string& reader : {"acme", "initech"}) {
    Finding leak;
    leak.detector = "output_scan";
    leak.kind = "foreign_marker";
    leak.severity = Severity::kCritical;
    leak.reader = reader;
    leak.writer = "globex";
    rows.push_back(leak);
  }
  const auto incidents = GroupIncidents("c", rows);
  int golden = 0, echo = 0, leaks = 0;
  for (const Incident& i : incidents) {
    if (i.detector == "golden") {
      ++golden;
      EXPECT_EQ(i.tenants, (std::set<std::string>{"acme", "globex"}));
      EXPECT_EQ(i.rows, 2);
    } else if (i.detector == "echo") {
      ++echo;
      EXPECT_EQ(i.tenants.size(), 4u);
    } else {
      ++leaks;
      EXPECT_EQ(i.writer, "globex");
      EXPECT_EQ(i.rows, 1);
      EXPECT_EQ(i.tenants.size(), 2u);
    }
  }
  EXPECT_EQ(golden, 2);
  EXPECT_EQ(echo, 1);
  EXPECT_EQ(leaks, 2);
}

// Ids come from the campaign and the key only: the order rows come in does
// not change them, and a leak's id is what it was before boundary rows
// were grouped by cause (the key of a trace incident did not change), so
// ids recorded in older evidence and bundles still match.
TEST(IncidentsTest, IdsAreStableAndALeaksIdIsUnchanged) {
  std::vector<Finding> rows = {TraceRead("acme", "globex", 7, 1, 1)};
  for (const std::string& t : kFour) {
    rows.push_back(
        BoundaryRow("boundary_accepted", t, "past_limit", 20, 130, 102, 102));
    rows.push_back(
        BoundaryRow("prompt_truncated", t, "past_limit", 20, 130, 102, 102));
  }
  std::set<std::string> ids;
  for (const Incident& i : GroupIncidents("c9", rows)) ids.insert(i.id);
  std::mt19937 rng(3);
  for (int n = 0; n < 5; ++n) {
    std::shuffle(rows.begin(), rows.end(), rng);
    std::set<std::string> again;
    for (const Incident& i : GroupIncidents("c9", rows)) again.insert(i.id);
    EXPECT_EQ(again, ids);
  }
  const nlohmann::json old_key = {{"node", "decode"},
                                  {"detector", "trace"},
                                  {"kind", "trace_foreign_tenant_read"},
                                  {"reader", "acme"},
                                  {"writer", "globex"}};
  EXPECT_TRUE(ids.count("i-" + Sha256Hex("c9\n" + old_key.dump()).substr(0, 8)))
      << *ids.begin();
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
  EXPECT_EQ(back.kinds, incidents[0].kinds);
  EXPECT_EQ(incidents[0].ToJson()["kinds"],
            nlohmann::json({{"trace_foreign_tenant_read", 1}}));
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
