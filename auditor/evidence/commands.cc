#include "auditor/evidence/commands.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "auditor/evidence/tlog_commands.h"
#include "auditor/result/finding.h"
#include "auditor/result/incidents.h"
#include "common/text_table.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"

namespace kvcanary::auditor {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "kvcanary-auditor: %s\n",
               std::string(s.message()).c_str());
  return 2;
}

// A prompt-token count of a finding's detail, "-" when it has none (the
// detail's -1 for no count, 0 for no limit).
std::string TokenCount(const nlohmann::json& detail, const char* key) {
  if (!detail.is_object() || !detail.contains(key)) return "-";
  const nlohmann::json& v = detail[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) return "-";
  return absl::StrCat(v.get<int64_t>());
}

// Raw finding rows, one line each, never cut mid-field. Boundary and
// truncation rows show the prompt tokens sent (the auditor's prediction),
// those the target reported, and the limit they were judged against.
void PrintRows(const std::vector<storage::EvidenceRow>& rows) {
  TextTable table({{"SEQ", TextTable::kLeft, 6},
                   {"CAMPAIGN", TextTable::kLeft, 26},
                   {"KIND", TextTable::kLeft, 26},
                   {"SEVERITY", TextTable::kLeft, 9},
                   {"DETECTOR", TextTable::kLeft, 12},
                   {"WRITER", TextTable::kLeft, 12},
                   {"READER", TextTable::kLeft, 12},
                   {"PROBE", TextTable::kLeft, 6},
                   {"SENT", TextTable::kLeft, 6},
                   {"REPORTED", TextTable::kLeft, 8},
                   {"LIMIT", TextTable::kLeft, 6},
                   {"ENGINE_REQUEST/PAGE"}},
                  TextTable::Plain(1));
  for (const storage::EvidenceRow& r : rows) {
    const nlohmann::json& b = r.record.body;
    const nlohmann::json d = b.value("detail", nlohmann::json::object());
    std::string where = absl::StrCat(b.value("engine_request", uint64_t{0}));
    if (d.contains("page")) absl::StrAppend(&where, "/", d["page"].dump());
    auto dash = [](const std::string& s) { return s.empty() ? "-" : s; };
    table.AddRow({absl::StrCat(r.seq), r.record.campaign, b.value("kind", ""),
                  b.value("severity", ""), b.value("detector", ""),
                  dash(b.value("writer", "")), dash(b.value("reader", "")),
                  b.contains("probe") ? b["probe"].dump() : "-",
                  TokenCount(d, "predicted_prompt_tokens"),
                  TokenCount(d, "reported_prompt_tokens"), TokenCount(d, "limit"),
                  where});
  }
  std::printf("%s%zu finding rows\n", table.ToString().c_str(), rows.size());
}

// The raw finding rows as a JSON array, each with its seq and campaign.
void PrintRowsJson(const std::vector<storage::EvidenceRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const storage::EvidenceRow& r : rows) {
    nlohmann::json j = r.record.body;
    j["seq"] = r.seq;
    j["campaign"] = r.record.campaign;
    out.push_back(std::move(j));
  }
  std::printf("%s\n", out.dump(2).c_str());
}

// Each campaign's incidents: its `incident` rows, or, for a campaign that
// ended before grouping (killed, or an error), its finding rows grouped
// here.
std::map<std::string, std::vector<Incident>> IncidentsByCampaign(
    const std::vector<storage::EvidenceRow>& incident_rows,
    const std::vector<storage::EvidenceRow>& finding_rows) {
  std::map<std::string, std::vector<Incident>> incidents;
  for (const storage::EvidenceRow& r : incident_rows) {
    incidents[r.record.campaign].push_back(Incident::FromJson(r.record.body));
  }
  std::map<std::string, std::vector<Finding>> ungrouped;
  for (const storage::EvidenceRow& r : finding_rows) {
    if (!incidents.count(r.record.campaign)) {
      ungrouped[r.record.campaign].push_back(Finding::FromJson(r.record.body));
    }
  }
  for (auto& [campaign, rows] : ungrouped) {
    JoinWriters(&rows);
    incidents[campaign] = GroupIncidents(campaign, rows);
  }
  return incidents;
}

// The rows of `kind` (of `campaign`, if given).
absl::StatusOr<std::vector<storage::EvidenceRow>> Rows(
    const storage::EvidenceStore& store, const std::string& campaign,
    const std::string& kind) {
  storage::EvidenceFilter filter;
  filter.campaign = campaign;
  filter.kind = kind;
  return store.Query(filter);
}

}  // namespace

int FindingsCommand(const FindingsOptions& o) {
  if (o.db.empty()) return Fail(absl::InvalidArgumentError("--db is required"));
  const std::string& format = o.format;
  if (format != "table" && format != "json") {
    return Fail(absl::InvalidArgumentError("--format: table or json"));
  }
  auto store = storage::EvidenceStore::OpenReadOnly(o.db);
  if (!store.ok()) return Fail(store.status());
  auto findings = Rows(**store, o.campaign, "finding");
  if (!findings.ok()) return Fail(findings.status());
  if (o.rows) {
    if (format == "table") {
      PrintRows(*findings);
    } else {
      PrintRowsJson(*findings);
    }
    return 0;
  }
  auto starts = Rows(**store, o.campaign, "campaign_start");
  auto ends = Rows(**store, o.campaign, "campaign_end");
  auto incident_rows = Rows(**store, o.campaign, "incident");
  if (!starts.ok() || !ends.ok() || !incident_rows.ok()) {
    return Fail(!starts.ok() ? starts.status()
                : !ends.ok() ? ends.status()
                             : incident_rows.status());
  }
  std::map<std::string, std::vector<Incident>> incidents =
      IncidentsByCampaign(*incident_rows, *findings);
  const bool writer_active = storage::EvidenceStore::WriterActive(o.db);
  std::map<std::string, nlohmann::json> end_of;
  for (const storage::EvidenceRow& e : *ends) {
    end_of[e.record.campaign] = e.record.body;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const storage::EvidenceRow& start : *starts) {
    const std::string& c = start.record.campaign;
    const auto& list = incidents[c];
    const auto end = end_of.find(c);
    std::string verdict =
        end != end_of.end()
            ? end->second.value("verdict", end->second.value("result", "?"))
        : writer_active ? "no end recorded yet (a writer holds the database)"
                        : "interrupted (no end recorded, no writer holds the "
                          "database)";
    // The error that stopped it, beside its verdict.
    const nlohmann::json error =
        end != end_of.end() ? end->second.value("error", nlohmann::json())
                            : nlohmann::json();
    if (format == "json") {
      nlohmann::json is = nlohmann::json::array();
      for (const Incident& i : list) is.push_back(i.ToJson());
      out.push_back({{"campaign", c},
                     {"verdict", verdict},
                     {"error", error},
                     {"incidents", is}});
      continue;
    }
    if (error.is_object()) {
      absl::StrAppend(&verdict, " (error: ", error.value("message", ""), ")");
    }
    std::printf("campaign %s: %s, %zu incidents\n", c.c_str(), verdict.c_str(),
                list.size());
    if (!list.empty()) {
      std::printf("%s", IncidentTable(list, o.max_lines).c_str());
    }
  }
  if (format == "json") std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int VerifyCommand(const VerifyOptions& o) {
  if (!o.checkpoint.empty() || !o.pubkey.empty()) {
    if (o.checkpoint.empty() || o.pubkey.empty()) {
      return Fail(
          absl::InvalidArgumentError("--checkpoint and --pubkey go together"));
    }
    return VerifyWithCheckpoints({o.db, o.checkpoint, o.pubkey});
  }
  if (o.db.empty()) return Fail(absl::InvalidArgumentError("--db is required"));
  auto report = storage::EvidenceStore::Verify(o.db);
  if (!report.ok()) return Fail(report.status());
  if (auto unfinished = UnfinishedCampaignLines(o.db); unfinished.ok()) {
    for (const std::string& line : *unfinished) {
      std::printf("%s\n", line.c_str());
    }
  }
  if (!report->ok) {
    std::printf("%s: TAMPERED: first bad row %lld: %s\n", o.db.c_str(),
                static_cast<long long>(report->first_bad_seq),
                report->problem.c_str());
    return 1;
  }
  std::printf(
      "%s: hash chain intact, %lld rows verified (without a checkpoint: "
      "edits are found, a cut tail or a re-hashed chain is not; pass "
      "--checkpoint and --pubkey)\n",
      o.db.c_str(), static_cast<long long>(report->rows_checked));
  return 0;
}

}  // namespace kvcanary::auditor
