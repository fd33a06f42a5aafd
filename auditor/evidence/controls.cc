#include "auditor/evidence/controls.h"

#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "auditor/reports/report_util.h"
#include "common/file.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
std::string RecordString(const nlohmann::json& j, const char* key,
                         const char* alt) {
  if (j.is_object()) {
    for (const char* k : {key, alt}) {
      if (k == nullptr) continue;
      auto it = j.find(k);
      if (it != j.end() && it->is_string()) return it->get<std::string>();
    }
  }
  return "";
}

namespace {

using json = nlohmann::json;

std::string Str(const json& j, const char* key, const char* alt = nullptr) {
  return RecordString(j, key, alt);
}
using report_internal::Arr;

std::vector<std::string> Strings(const json& j, const char* key) {
  std::vector<std::string> out;
  for (const json& v : Arr(j, key)) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

absl::Status RowError(size_t i, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("controls[", i, "]: ", what));
}

// Whether a control row maps `command` at all (detector "" = any).
const ControlEvidence* EvidenceFor(const Control& c, const std::string& cmd) {
  for (const ControlEvidence& e : c.evidence) {
    if (e.command == cmd) return &e;
  }
  return nullptr;
}

std::string CoverageText(const json& coverage) {
  std::vector<std::string> parts;
  if (coverage.is_object()) {
    for (auto it = coverage.begin(); it != coverage.end(); ++it) {
      parts.push_back(absl::StrCat(it.key(), " ", it->dump()));
    }
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ", ");
}

// The cited rows as ranges of consecutive seqs: "1..621 640 650..652".
std::string RowsText(const json& campaign) {
  std::vector<int64_t> seqs;
  for (const json& s : Arr(campaign, "cited_rows")) {
    if (s.is_number_integer()) seqs.push_back(s.get<int64_t>());
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < seqs.size();) {
    size_t j = i;
    while (j + 1 < seqs.size() && seqs[j + 1] == seqs[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(seqs[i])
                           : absl::StrCat(seqs[i], "..", seqs[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, " ");
}

std::string Md(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"|", "\\|"}, {"\r", " "}, {"\n", " "}});
}

std::string Period(const ExportContext& ctx) {
  return absl::StrCat(ctx.since, " to ",
                      ctx.until.empty() ? "(open)" : ctx.until);
}

std::string IncidentLine(const json& inc) {
  std::string who = Str(inc, "writer").empty() ? "?" : Str(inc, "writer");
  absl::StrAppend(&who, " -> ",
                  Str(inc, "reader").empty() ? "?" : Str(inc, "reader"));
  return absl::StrCat(Str(inc, "severity"), " ", Str(inc, "kind"), " ", who,
                      ", ", inc.value("rows", json(0)).dump(), " rows");
}

// The sheet's content as (section, item, value, reference) rows; CSV and
// Markdown are two renderings of it.
struct SheetRow {
  std::string section, item, value, reference;
};

std::vector<SheetRow> SheetRows(const Control& c,
                                const std::vector<json>& campaigns,
                                const ControlAssessment& a,
                                const ExportContext& ctx) {
  std::vector<SheetRow> rows;
  rows.push_back({"control", c.id, c.title, c.framework});
  rows.push_back({"answer", AnswerText(a.answer), a.why, ""});
  rows.push_back({"period", ctx.since, ctx.until, ""});
  rows.push_back(
      {"checkpoint", ctx.origin,
       absl::StrCat("tree size ", ctx.tree_size, ", root ", ctx.root_hash_hex),
       ctx.checkpoint_file});
  for (size_t i : a.campaigns) {
    const json& k = campaigns[i];
    const std::string file = Str(k, "file");
    rows.push_back(
        {"campaign", Str(k, "campaign"),
         absl::StrCat(Str(k, "command"), " on ", Str(k, "target"), ", ",
                      Str(k, "started", "started_at"), " to ",
                      Str(k, "ended", "ended_at"), ": ", Str(k, "verdict"),
                      "; tenants ", absl::StrJoin(Strings(k, "tenants"), " ")),
         file});
    for (const json& d : Arr(k, "detectors")) {
      const std::string name = Str(d, "name");
      if (!ControlCovers(c, Str(k, "command"), name)) continue;
      rows.push_back(
          {"detector", absl::StrCat(Str(k, "campaign"), "/", name),
           absl::StrCat(
               Str(d, "state"), d.value("required", true) ? "" : " (optional)",
               "; floor ", d.value("floor", json(0)).dump(), "; coverage ",
               CoverageText(d.value("coverage", json()))),
           file});
    }
    for (const json& inc : Arr(k, "incidents")) {
      if (!IsOpenIncident(inc) ||
          !ControlCovers(c, Str(k, "command"), Str(inc, "detector"))) {
        continue;
      }
      rows.push_back(
          {"open_incident", Str(inc, "id"), IncidentLine(inc), file});
    }
    const std::string cited = RowsText(k);
    if (!cited.empty()) {
      rows.push_back({"evidence_rows", Str(k, "campaign"), cited, file});
    }
  }
  for (const ControlEvidence& e : c.evidence) {
    rows.push_back(
        {"mapped_evidence", e.command,
         absl::StrCat(absl::StrJoin(e.detectors, " "), ": ", e.supports),
         "docs/controls.md"});
  }
  return rows;
}

std::string SheetCsv(const std::vector<SheetRow>& rows) {
  std::string out = "section,item,value,reference\r\n";
  for (const SheetRow& r : rows) {
    absl::StrAppend(&out, CsvField(r.section), ",", CsvField(r.item), ",",
                    CsvField(r.value), ",", CsvField(r.reference), "\r\n");
  }
  return out;
}

std::string SheetMarkdown(const Control& c, const ControlAssessment& a,
                          const std::vector<SheetRow>& rows,
                          const ExportContext& ctx) {
  std::string out = absl::StrCat(
      "# ", Md(c.id), " ", Md(c.title), " (", Md(c.framework),
      ")\n\n**Answer: ", AnswerText(a.answer), "** — ", Md(a.why), "\n\n");
  if (!c.summary.empty()) absl::StrAppend(&out, Md(c.summary), "\n\n");
  if (c.licensed) {
    absl::StrAppend(&out,
                    "_Licensed framework: fill in the control text from "
                    "your own copy; the evidence is that of `",
                    Md(c.maps_to), "`._\n\n");
  }
  absl::StrAppend(&out, "Period covered: ", Md(Period(ctx)), ". Checkpoint `",
                  Md(ctx.checkpoint_file), "` (", Md(ctx.origin),
                  ", tree size ", ctx.tree_size, ").\n\n");
  absl::StrAppend(&out,
                  "| section | item | value | reference |\n"
                  "|---|---|---|---|\n");
  for (size_t i = 1; i < rows.size(); ++i) {  // rows[0] is the heading
    const SheetRow& r = rows[i];
    absl::StrAppend(
        &out, "| ", Md(r.section), " | ", Md(r.item), " | ", Md(r.value), " | ",
        r.reference.empty() ? "" : absl::StrCat("`", Md(r.reference), "`"),
        " |\n");
  }
  return out;
}

}  // namespace

bool IsOscalToken(absl::string_view s) {
  if (s.empty()) return false;
  auto letter = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_';
  };
  if (!letter(s[0])) return false;
  for (char ch : s) {
    if (!letter(ch) && !(ch >= '0' && ch <= '9') && ch != '.' && ch != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<Control>> ParseControls(absl::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("controls: not a JSON object");
  }
  const json& rows = Arr(doc, "controls");
  std::vector<Control> out;
  std::map<std::string, size_t> by_id;
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    Control c;
    c.framework = Str(r, "framework");
    c.id = Str(r, "id");
    c.oscal_id = Str(r, "oscal_id");
    c.title = Str(r, "title");
    c.summary = Str(r, "summary");
    c.licensed = r.value("licensed", false);
    c.maps_to = Str(r, "maps_to");
    if (!IsOscalToken(c.oscal_id)) return RowError(i, "bad oscal_id");
    if (by_id.count(c.oscal_id)) return RowError(i, "duplicate oscal_id");
    for (const json& e : Arr(r, "evidence")) {
      ControlEvidence ev{Str(e, "command"), Strings(e, "detectors"),
                         Str(e, "supports")};
      if (ev.command.empty()) return RowError(i, "evidence without command");
      c.evidence.push_back(std::move(ev));
    }
    by_id[c.oscal_id] = out.size();
    out.push_back(std::move(c));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].maps_to.empty()) continue;
    auto it = by_id.find(out[i].maps_to);
    if (it == by_id.end()) return RowError(i, "unknown maps_to");
    if (out[i].evidence.empty()) out[i].evidence = out[it->second].evidence;
  }
  return out;
}

absl::StatusOr<std::vector<Control>> LoadControls(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  return ParseControls(text);
}

bool IsOpenIncident(const json& incident) {
  const std::string s = Str(incident, "status");
  return s != "closed" && s != "resolved" && s != "accepted";
}

const char* AnswerText(Answer a) {
  switch (a) {
    case Answer::kYesTested:
      return "Yes, tested";
    case Answer::kPartially:
      return "Partially";
    case Answer::kNoFindingsOpen:
      return "No, findings open";
    case Answer::kNoEvidence:
      return "No evidence";
  }
  return "No evidence";
}

bool ControlCovers(const Control& control, const std::string& command,
                   const std::string& detector) {
  const ControlEvidence* e = EvidenceFor(control, command);
  if (e == nullptr) return false;
  if (e->detectors.empty()) return true;
  for (const std::string& d : e->detectors) {
    if (d == detector) return true;
  }
  return false;
}

ControlAssessment AssessControl(const Control& control,
                                const std::vector<json>& campaigns) {
  ControlAssessment a;
  int open = 0, partial = 0;
  std::set<std::string> partial_why;
  for (size_t i = 0; i < campaigns.size(); ++i) {
    const json& k = campaigns[i];
    const std::string command = Str(k, "command");
    if (EvidenceFor(control, command) == nullptr) continue;
    a.campaigns.push_back(i);
    const std::string verdict = Str(k, "verdict");
    if (verdict == "error" || verdict == "inconclusive") {
      ++partial;
      partial_why.insert(absl::StrCat(Str(k, "campaign"), " ", verdict));
    }
    for (const json& d : Arr(k, "detectors")) {
      if (ControlCovers(control, command, Str(d, "name")) &&
          d.value("required", true) && Str(d, "state") != "active") {
        ++partial;
        partial_why.insert(absl::StrCat(Str(k, "campaign"), " ", Str(d, "name"),
                                        " ", Str(d, "state")));
      }
    }
    for (const json& inc : Arr(k, "incidents")) {
      if (IsOpenIncident(inc) &&
          ControlCovers(control, command, Str(inc, "detector"))) {
        ++open;
      }
    }
  }
  if (a.campaigns.empty()) {
    a.answer = Answer::kNoEvidence;
    a.why = "no campaign of a mapped command in the period";
  } else if (open > 0) {
    a.answer = Answer::kNoFindingsOpen;
    a.why = absl::StrCat(open, " open incident(s) in ", a.campaigns.size(),
                         " campaign(s)");
  } else if (partial > 0) {
    a.answer = Answer::kPartially;
    a.why = absl::StrCat("not every check reached its floor: ",
                         absl::StrJoin(partial_why, "; "));
  } else {
    a.answer = Answer::kYesTested;
    a.why = absl::StrCat(a.campaigns.size(),
                         " campaign(s), every mapped detector active, no "
                         "open incident");
  }
  return a;
}

std::map<std::string, std::string> AnswerSheets(
    const std::vector<json>& campaigns, const std::vector<Control>& controls,
    const ExportContext& ctx) {
  std::map<std::string, std::string> out;
  for (const Control& c : controls) {
    if (c.id.empty()) continue;  // a row left for the user to fill
    const ControlAssessment a = AssessControl(c, campaigns);
    const std::vector<SheetRow> rows = SheetRows(c, campaigns, a, ctx);
    const std::string stem = absl::StrCat("answers/", c.oscal_id);
    out[stem + ".csv"] = SheetCsv(rows);
    out[stem + ".md"] = SheetMarkdown(c, a, rows, ctx);
  }
  return out;
}

std::string CsvField(absl::string_view s) {
  std::string v(s);
  if (!v.empty() && (v[0] == '=' || v[0] == '+' || v[0] == '-' || v[0] == '@' ||
                     v[0] == '\t' || v[0] == '\r')) {
    v.insert(0, "'");
  }
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  return absl::StrCat("\"", absl::StrReplaceAll(v, {{"\"", "\"\""}}), "\"");
}

}  // namespace kvcanary::auditor
