#include "auditor/evidence/bundle_html.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auditor/reports/report_util.h"

namespace kvcanary::auditor {
namespace {

using nlohmann::json;
using report_internal::Arr;
using report_internal::Esc;
using report_internal::Str;
using report_internal::Text;

constexpr char kCss[] = R"css(
*{box-sizing:border-box}
body{margin:0;background:#eef0f3;color:#1d2330;font:14px/1.4 "DejaVu Sans",Verdana,sans-serif}
main{max-width:1180px;margin:0 auto;padding:14px 16px 24px}
.banner{color:#fff;padding:14px 22px;border-radius:8px}
.banner.yes{background:#1b7f3b}.banner.no{background:#b3261e}
.banner.partial{background:#9a5800}.banner.none{background:#4f4a78}
.answer{font-size:34px;font-weight:bold;letter-spacing:1px}
section{background:#fff;border-radius:8px;padding:10px 16px 12px;margin-top:12px;box-shadow:0 1px 2px rgba(0,0,0,.12)}
h2{font-size:16px;margin:0 0 8px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 14px;margin:0}
dt{color:#5b6373}dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:3px 7px;border-bottom:1px solid #e2e5ea;vertical-align:top}
th{background:#f1f3f6;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;padding:0 6px;border-radius:4px;font-size:12px;font-weight:bold;color:#fff}
.yes,.clean,.active{background:#1b7f3b}.no,.findings,.critical{background:#b3261e}
.partial,.inconclusive,.high{background:#9a5800}.none,.error,.other{background:#4f4a78}
code{font-size:12px;overflow-wrap:anywhere}
footer{margin-top:10px;font-size:12px;color:#5b6373}
)css";

const char* AnswerClass(Answer a) {
  switch (a) {
    case Answer::kYesTested:
      return "yes";
    case Answer::kNoFindingsOpen:
      return "no";
    case Answer::kPartially:
      return "partial";
    case Answer::kNoEvidence:
      return "none";
  }
  return "none";
}

// Only known words become CSS classes; anything else is "other".
std::string WordClass(const std::string& w) {
  for (const char* k : {"clean", "findings", "inconclusive", "error", "active",
                        "critical", "high"}) {
    if (w == k) return k;
  }
  return "other";
}

std::string Badge(const std::string& word) {
  return absl::StrCat("<span class=\"badge ", WordClass(word), "\">", Esc(word),
                      "</span>");
}

std::string Link(const std::string& href, const std::string& text) {
  if (href.empty()) return Esc(text);
  return absl::StrCat("<a href=\"", Esc(href), "\">", Esc(text), "</a>");
}

// The worst answer over the controls with an id (No evidence when none).
Answer Overall(const std::vector<Answer>& answers) {
  Answer worst = Answer::kYesTested;
  for (Answer a : answers) {
    if (a == Answer::kNoFindingsOpen) return a;
    if (a == Answer::kNoEvidence || worst == Answer::kYesTested) worst = a;
  }
  return answers.empty() ? Answer::kNoEvidence : worst;
}

std::string ControlsSection(const std::vector<json>& campaigns,
                            const std::vector<Control>& controls,
                            std::vector<Answer>* answers) {
  std::string out =
      "<section><h2>Controls</h2><table><tr><th>framework</th><th>control"
      "</th><th>title</th><th>answer</th><th>why</th><th>sheets</th></tr>";
  for (const Control& c : controls) {
    if (c.id.empty()) continue;
    const ControlAssessment a = AssessControl(c, campaigns);
    answers->push_back(a.answer);
    const std::string stem = "answers/" + c.oscal_id;
    absl::StrAppend(&out, "<tr><td>", Esc(c.framework), "</td><td>", Esc(c.id),
                    "</td><td>", Esc(c.title), "</td><td><span class=\"badge ",
                    AnswerClass(a.answer), "\">", AnswerText(a.answer),
                    "</span></td><td>", Esc(a.why), "</td><td>",
                    Link(stem + ".md", "md"), " ", Link(stem + ".csv", "csv"),
                    "</td></tr>");
  }
  return out + "</table></section>";
}

std::string DetectorStates(const json& campaign) {
  std::vector<std::string> parts;
  for (const json& d : Arr(campaign, "detectors")) {
    parts.push_back(
        absl::StrCat(Esc(Str(d, "name")), " ", Badge(Str(d, "state"))));
  }
  return absl::StrJoin(parts, " ");
}

std::string CampaignsSection(const std::vector<json>& campaigns) {
  std::string out =
      "<section><h2>Campaigns</h2><table><tr><th>campaign</th><th>command"
      "</th><th>target</th><th>tenants</th><th>started</th><th>ended</th>"
      "<th>verdict</th><th>detectors</th></tr>";
  for (const json& k : campaigns) {
    std::vector<std::string> tenants;
    for (const json& t : Arr(k, "tenants")) tenants.push_back(Esc(Text(t)));
    const std::string started =
        Str(k, "started").empty() ? Str(k, "started_at") : Str(k, "started");
    const std::string ended =
        Str(k, "ended").empty() ? Str(k, "ended_at") : Str(k, "ended");
    absl::StrAppend(
        &out, "<tr><td>", Link(Str(k, "file"), Str(k, "campaign")), "</td><td>",
        Esc(Str(k, "command")), "</td><td>", Esc(Str(k, "target")), "</td><td>",
        absl::StrJoin(tenants, ", "), "</td><td>", Esc(started), "</td><td>",
        Esc(ended), "</td><td>", Badge(Str(k, "verdict")), "</td><td>",
        DetectorStates(k), "</td></tr>");
  }
  if (campaigns.empty()) {
    out += "<tr><td colspan=\"8\">No campaign in the window.</td></tr>";
  }
  return out + "</table></section>";
}

std::string IncidentsSection(const std::vector<json>& campaigns) {
  std::string rows;
  for (const json& k : campaigns) {
    for (const json& inc : Arr(k, "incidents")) {
      if (!IsOpenIncident(inc)) continue;
      absl::StrAppend(
          &rows, "<tr><td>", Esc(Str(inc, "id")), "</td><td>",
          Link(Str(k, "file"), Str(k, "campaign")), "</td><td>",
          Badge(Str(inc, "severity")), "</td><td>", Esc(Str(inc, "kind")),
          "</td><td>", Esc(Text(inc.value("writer", json()))), " &rarr; ",
          Esc(Text(inc.value("reader", json()))), "</td><td class=\"n\">",
          Esc(Text(inc.value("rows", json()))), "</td><td>",
          Esc(Str(inc, "summary")), "</td></tr>");
    }
  }
  if (rows.empty()) rows = "<tr><td colspan=\"7\">None.</td></tr>";
  return absl::StrCat(
      "<section><h2>Open incidents</h2><table><tr><th>incident</th>"
      "<th>campaign</th><th>severity</th><th>kind</th><th>writer &rarr; "
      "reader</th><th>rows</th><th>summary</th></tr>",
      rows, "</table></section>");
}

}  // namespace

std::string BundleHtml(const std::vector<json>& campaigns,
                       const std::vector<Control>& controls,
                       const ExportContext& ctx) {
  std::vector<Answer> answers;
  const std::string controls_html =
      ControlsSection(campaigns, controls, &answers);
  const Answer overall = Overall(answers);
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>kvcanary bundle ",
      Esc(ctx.origin), "</title><style>", kCss,
      "</style></head><body><main><div class=\"banner ", AnswerClass(overall),
      "\"><div class=\"answer\">Tenant isolation: ", AnswerText(overall),
      "</div><div>", Esc(ctx.since), " to ", Esc(ctx.until), " &middot; ",
      campaigns.size(),
      " campaign(s)</div></div><section><h2>Evidence log</h2><dl><dt>origin"
      "</dt><dd>",
      Esc(ctx.origin), "</dd><dt>tree size</dt><dd>", ctx.tree_size,
      "</dd><dt>root hash</dt><dd><code>", Esc(ctx.root_hash_hex),
      "</code></dd><dt>checkpoint</dt><dd>",
      Link(ctx.checkpoint_file, ctx.checkpoint_file),
      "</dd><dt>OSCAL</dt><dd>assessment results in the bundle</dd></dl>"
      "</section>",
      controls_html, CampaignsSection(campaigns), IncidentsSection(campaigns),
      "<footer>Check this bundle offline: <code>kvcanary-auditor "
      "verify-bundle DIR --pubkey KEY.pub</code>. The control map and the "
      "answer rules: docs/controls.md.</footer></main></body></html>\n");
}

}  // namespace kvcanary::auditor
