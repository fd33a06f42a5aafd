#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/reports/html_timeline.h"
#include "auditor/reports/report.h"
#include "auditor/reports/report_util.h"

namespace kvcanary::auditor {
namespace {

using nlohmann::json;
using report_internal::Arr;
using report_internal::BelowFloor;
using report_internal::Count;
using report_internal::Esc;
using report_internal::Get;
using report_internal::Int;
using report_internal::Num;
using report_internal::SeverityRank;
using report_internal::Str;
using report_internal::TenantOrDash;
using report_internal::Text;

constexpr int kMaxIncidentRows = 200;
constexpr int kMaxReasons = 12;

constexpr char kCss[] = R"css(
*{box-sizing:border-box}
body{margin:0;background:#eef0f3;color:#1d2330;font:14px/1.4 "DejaVu Sans",Verdana,sans-serif}
main{max-width:1180px;margin:0 auto;padding:14px 16px 24px}
.banner{display:grid;grid-template-columns:1fr auto;gap:4px 24px;color:#fff;padding:14px 22px;border-radius:8px}
.banner.clean{background:#1b7f3b}.banner.findings{background:#b3261e}
.banner.inconclusive{background:#9a5800}.banner.error{background:#4f4a78}
.verdict{font-size:52px;font-weight:bold;letter-spacing:3px;text-transform:uppercase;line-height:1.1}
.side{text-align:right;font-size:13px;opacity:.95}.exit{font-size:22px;font-weight:bold}
.reasons{grid-column:1/-1;margin:4px 0 0;padding-left:20px;font-size:14px}
p.reasons{padding-left:0;opacity:.9}
section{background:#fff;border-radius:8px;padding:10px 16px 12px;margin-top:12px;box-shadow:0 1px 2px rgba(0,0,0,.12)}
h2{font-size:16px;margin:0 0 8px}
p{margin:6px 0 0}
p.caption{margin:0 0 6px}
dl.summary{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:3px 14px;margin:0}
dt{color:#5b6373}dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:left;padding:3px 7px;border-bottom:1px solid #e2e5ea;vertical-align:top}
th{background:#f1f3f6;font-weight:600}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.low{background:#ffd9d6;color:#8a1010;font-weight:bold}
td.hit{color:#b3261e;font-weight:bold}
svg{width:100%;height:auto}
.small{font-size:12px;color:#5b6373}.opt{font-size:11px;color:#5b6373}
.badge{display:inline-block;padding:0 6px;border-radius:4px;font-size:12px;font-weight:bold;color:#fff}
.active{background:#1b7f3b}.inconclusive{background:#9a5800}.disabled{background:#7a808c}
.critical{background:#8e1b14}.high{background:#d0451b}.medium{background:#b7860b}.low-sev{background:#4b6584}
.more{font-style:italic;color:#5b6373}.nw{white-space:nowrap}
ul.controls{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:6px}
ul.controls li{padding:2px 10px;border-radius:12px;font-size:13px}
li.fired{background:#d8f0de;color:#14532d}li.silent{background:#ffd9d6;color:#8a1010;font-weight:bold}
svg text{font:12px "DejaVu Sans",Verdana,sans-serif;fill:#1d2330}
footer{margin-top:10px;font-size:12px;color:#5b6373}
)css";

// Unknown verdicts are drawn like errors.
std::string VerdictClass(const std::string& verdict) {
  for (const char* v : {"clean", "findings", "inconclusive"}) {
    if (verdict == v) return v;
  }
  return "error";
}

// The CSS class of a detector state or a severity; unknown words are grey.
std::string KnownClass(const std::string& word) {
  if (word == "low") return "low-sev";
  for (const char* w :
       {"active", "inconclusive", "disabled", "critical", "high", "medium"}) {
    if (word == w) return w;
  }
  return "disabled";
}

std::string Badge(const std::string& word, const std::string& css_class) {
  return absl::StrCat("<span class=\"badge ", css_class, "\">", Esc(word),
                      "</span>");
}

const char* VerdictMeaning(const std::string& verdict,
                           const std::string& error_phase) {
  if (verdict == "clean") {
    return "No incidents; every required detector active and at its floor "
           "for every tenant.";
  }
  if (verdict == "findings") {
    return "Incidents below: whose data, read by whom, how often.";
  }
  if (verdict == "inconclusive") {
    return "The campaign ran, but could not vouch for everything it was "
           "asked to check.";
  }
  if (error_phase == "audit") {
    return "The campaign stopped before its end and proved nothing before "
           "it: no verdict on what it was asked to check.";
  }
  return "The campaign could not run: nothing was checked.";
}

void AppendBanner(const json& r, std::string* out) {
  const std::string verdict = Str(r, "verdict");
  absl::StrAppend(
      out, "<header class=\"banner ", VerdictClass(verdict),
      "\"><div class=\"verdict\">", Esc(verdict.empty() ? "unknown" : verdict),
      "</div><div class=\"side\"><div class=\"exit\">exit ",
      Esc(Str(r, "exit_code")), "</div><div>", Esc(Str(r, "campaign")),
      "</div><div>", Esc(Str(r, "target")), "</div></div>");
  const json& reasons = Arr(r, "reasons");
  if (!reasons.empty()) {
    absl::StrAppend(out, "<ul class=\"reasons\">");
    for (size_t i = 0; i < reasons.size() && i < kMaxReasons; ++i) {
      absl::StrAppend(out, "<li>", Esc(Text(reasons[i])), "</li>");
    }
    if (reasons.size() > kMaxReasons) {
      absl::StrAppend(out, "<li>and ", reasons.size() - kMaxReasons,
                      " more</li>");
    }
    absl::StrAppend(out, "</ul>");
  }
  const json& error = Get(r, "error");
  if (error.is_object() && verdict != "error") {
    absl::StrAppend(out, "<p class=\"reasons\"><b>error:</b> ",
                    Esc(Str(error, "message")),
                    " (the run stopped before its end; the findings were "
                    "proven before it)</p>");
  }
  absl::StrAppend(out, "<p class=\"reasons\">",
                  VerdictMeaning(verdict, Str(error, "phase")), "</p>");
  absl::StrAppend(out, "</header>\n");
}

// "ok 600, http_4xx 12" from {"ok": 600, "http_4xx": 12}.
std::string CountsLine(const json& counts) {
  std::vector<std::string> parts;
  if (counts.is_object()) {
    for (const auto& [k, v] : counts.items()) {
      parts.push_back(absl::StrCat(k, " ", Count(Int(v))));
    }
  }
  return absl::StrJoin(parts, ", ");
}

std::string LimitLine(const json& l) {
  const auto tokens = [&](const char* key, const char* what) {
    const json& v = Get(l, key);
    return v.is_number() ? absl::StrCat(Count(Int(v)), " ", what)
                         : absl::StrCat(what, " unknown");
  };
  std::string line = absl::StrCat(
      tokens("prompt_tokens", "prompt tokens"), ", ",
      tokens("context_tokens", "context tokens"), " (", Str(l, "source"));
  if (!Str(l, "where").empty()) absl::StrAppend(&line, ": ", Str(l, "where"));
  return line + ")";
}

std::string PlantsLine(const json& p) {
  std::string line =
      absl::StrCat(Count(Int(Get(p, "accepted_whole"))), " of ",
                   Count(Int(Get(p, "sent"))), " accepted whole; ",
                   Count(Int(Get(p, "prompt_tokens"))), " prompt tokens each");
  if (Get(p, "fill").is_number()) {
    absl::StrAppend(&line, absl::StrFormat(" (%.0f%% of the limit)",
                                           100 * Num(Get(p, "fill"))));
  }
  absl::StrAppend(&line, ", ", Count(Int(Get(p, "markers_per_plant"))),
                  " markers each");
  if (!Str(p, "form").empty()) {
    absl::StrAppend(&line, ", ", Str(p, "form"), " form");
  }
  return line;
}

void AppendSummary(const json& r, std::string* out) {
  std::vector<std::pair<std::string, std::string>> rows;  // label, text
  const auto add = [&](const char* label, const char* key, std::string text) {
    if (!Get(r, key).is_null()) rows.emplace_back(label, std::move(text));
  };
  add("Target", "target", Str(r, "target"));
  add("Model", "model", Str(r, "model"));
  add("API", "api", Str(r, "api"));
  std::vector<std::string> tenants;
  for (const json& t : Arr(r, "tenants")) tenants.push_back(Text(t));
  add("Tenants", "tenants", absl::StrJoin(tenants, ", "));
  add("Started", "started_at", Str(r, "started_at"));
  add("Ended", "ended_at", Str(r, "ended_at"));
  add("Elapsed", "elapsed_s",
      absl::StrFormat("%.1f s", Num(Get(r, "elapsed_s"))));
  add("Limit", "limit", LimitLine(Get(r, "limit")));
  add("Plants", "plants", PlantsLine(Get(r, "plants")));
  const json& p = Get(r, "probes");
  add("Probes", "probes",
      absl::StrCat(Count(Int(Get(p, "usable"))), " usable of ",
                   Count(Int(Get(p, "sent"))), " sent (",
                   CountsLine(Get(p, "by_outcome")),
                   "); by kind: ", CountsLine(Get(p, "by_kind"))));
  const json& f = Get(r, "findings");
  add("Raw findings", "findings",
      absl::StrCat(Count(Int(Get(f, "total"))), " rows",
                   Get(f, "by_kind").empty() ? "" : ": ",
                   CountsLine(Get(f, "by_kind"))));
  const json& e = Get(r, "evidence");
  add("Evidence", "evidence",
      absl::StrCat(Str(e, "db"), ", rows ", Str(e, "first_seq"), " to ",
                   Str(e, "last_seq")));
  absl::StrAppend(out, "<section><h2>Campaign</h2><dl class=\"summary\">");
  for (const auto& [label, text] : rows) {
    absl::StrAppend(out, "<dt>", label, "</dt><dd>", Esc(text), "</dd>");
  }
  absl::StrAppend(out, "</dl></section>\n");
}

void AppendDetectorRow(const json& d, const json& tenants, std::string* out) {
  const std::string state = Str(d, "state");
  const bool required = Get(d, "required") != false;
  absl::StrAppend(out, "<tr><td>", Esc(Str(d, "name")),
                  required ? "" : " <span class=\"opt\">optional</span>",
                  "</td><td>", Badge(state, KnownClass(state)),
                  "</td><td class=\"n\">", Count(Int(Get(d, "floor"))),
                  "</td>");
  for (const json& t : tenants) {
    const std::string tenant = Text(t);
    const json& cov = Get(Get(d, "coverage"), tenant.c_str());
    const bool low = state != "disabled" && BelowFloor(d, tenant);
    absl::StrAppend(out, "<td class=\"n", low ? " low" : "", "\">",
                    cov.is_number() ? Count(Int(cov)) : "-", "</td>");
  }
  const int64_t findings = Int(Get(d, "findings"));
  absl::StrAppend(out, "<td class=\"n", findings > 0 ? " hit" : "", "\">",
                  Count(findings), "</td><td>", Esc(Str(d, "unit")));
  if (!Str(d, "reason").empty()) {
    absl::StrAppend(out, "<br><b>", Esc(Str(d, "reason")), "</b>");
  }
  for (const json& n : Arr(d, "notes")) {
    absl::StrAppend(out, "<br><span class=\"small\">", Esc(Text(n)), "</span>");
  }
  absl::StrAppend(out, "</td></tr>");
}

void AppendCoverage(const json& r, std::string* out) {
  if (!Get(r, "detectors").is_array()) return;
  const json& tenants = Arr(r, "tenants");
  absl::StrAppend(out,
                  "<section><h2>Coverage per tenant</h2><table><tr>"
                  "<th>Detector</th><th>State</th><th class=\"n\">Floor</th>");
  for (const json& t : tenants) {
    absl::StrAppend(out, "<th class=\"n\">", Esc(Text(t)), "</th>");
  }
  absl::StrAppend(
      out, "<th class=\"n\">Findings</th><th>Unit, reason, notes</th></tr>");
  for (const json& d : Arr(r, "detectors")) AppendDetectorRow(d, tenants, out);
  absl::StrAppend(out,
                  "</table><p class=\"small\">Each cell counts the "
                  "detector's unit for one tenant; red: below the floor."
                  "</p></section>\n");
}

// The tokens spent per tenant, its 429/503 answers, and the budget.
void AppendSpend(const json& r, std::string* out) {
  const json& spend = Get(r, "spend");
  if (!spend.is_object() || Get(spend, "tenants").empty()) return;
  absl::StrAppend(out, "<section><h2>Spend</h2><p>",
                  Count(Int(Get(spend, "tokens"))), " tokens");
  if (Get(spend, "budget_tokens").is_number_integer()) {
    absl::StrAppend(
        out, " of a ", Count(Int(Get(spend, "budget_tokens"))), "-token budget",
        Get(spend, "budget_reached") == true ? " (reached: new probes stopped)"
                                             : "");
  }
  const int64_t cuts = Int(Get(spend, "rate_cuts"));
  if (cuts > 0) {
    absl::StrAppend(out, "; sending rate cut ", Count(cuts),
                    " times for 429/503");
  }
  absl::StrAppend(out,
                  ".</p><table><tr><th>Tenant</th><th class=\"n\">Prompt</th>"
                  "<th class=\"n\">Cached</th><th class=\"n\">Completion</th>"
                  "<th class=\"n\">Rate-limited</th><th class=\"n\">Retries"
                  "</th></tr>");
  for (const auto& [tenant, t] : Get(spend, "tenants").items()) {
    absl::StrAppend(out, "<tr><td>", Esc(tenant), "</td>");
    for (const char* k : {"prompt_tokens", "cached_tokens", "completion_tokens",
                          "rate_limited", "retries"}) {
      absl::StrAppend(out, "<td class=\"n\">", Count(Int(Get(t, k))), "</td>");
    }
    absl::StrAppend(out, "</tr>");
  }
  absl::StrAppend(out,
                  "</table><p class=\"small\">As the target's usage reported "
                  "them; cached is part of prompt. A 429/503 is sent again "
                  "after its Retry-After and is no failure.</p></section>\n");
}

// A command's checks (accept: one per length and check), failed first.
void AppendChecks(const json& r, std::string* out) {
  const json& checks = Arr(r, "checks");
  if (checks.empty()) return;
  int failed = 0;
  for (const json& c : checks) failed += Str(c, "state") == "failed";
  absl::StrAppend(out, "<section><h2>Checks (", Count(checks.size()), ", ",
                  Count(failed),
                  " failed)</h2><table><tr><th>Check</th><th>Subject</th>"
                  "<th>State</th><th>Detail</th></tr>");
  for (const char* pass : {"failed", "error", "passed", "skipped"}) {
    for (const json& c : checks) {
      const std::string state = Str(c, "state");
      if (state != pass) continue;
      const std::string css = state == "failed"   ? "findings"
                              : state == "error"  ? "inconclusive"
                              : state == "passed" ? "active"
                                                  : "disabled";
      absl::StrAppend(out, "<tr><td>", Esc(Str(c, "check")), "</td><td>",
                      Esc(Str(c, "subject")), "</td><td>", Badge(state, css),
                      "</td><td>", Esc(Str(c, "message")), "</td></tr>");
    }
  }
  absl::StrAppend(out, "</table></section>\n");
}

// The command's own results (facts, cache audit, forensics), as they are.
void AppendDetails(const json& r, std::string* out) {
  const std::string command = Str(r, "command");
  if (command.empty() || command == "probe") return;
  std::string key = command;
  for (char& c : key) c = c == '-' ? '_' : c;
  const json& details = Get(r, key.c_str());
  if (!details.is_object()) return;
  absl::StrAppend(out, "<section><h2>", Esc(command),
                  "</h2><table><tr><th>Field</th><th>Value</th></tr>");
  for (const auto& [k, v] : details.items()) {
    absl::StrAppend(out, "<tr><td>", Esc(k), "</td><td><code>",
                    Esc(v.is_string() ? v.get<std::string>()
                                      : v.dump(-1, ' ', false,
                                               json::error_handler_t::replace)),
                    "</code></td></tr>");
  }
  absl::StrAppend(out, "</table></section>\n");
}

// "10:15:03.2Z" when on the campaign's start date, else the full timestamp.
std::string ShortTime(const std::string& ts, const std::string& started) {
  if (ts.size() > 11 && started.size() > 11 && ts[10] == 'T' &&
      ts.compare(0, 10, started, 0, 10) == 0) {
    return ts.substr(11);
  }
  return ts;
}

void AppendIncidentRow(const json& i, const std::string& started,
                       std::string* out) {
  const std::string sev = Str(i, "severity");
  const std::string first = Str(i, "first_seen"), last = Str(i, "last_seen");
  absl::StrAppend(
      out, "<tr><td><b>", Esc(TenantOrDash(i, "writer")), "</b></td><td><b>",
      Esc(TenantOrDash(i, "reader")), "</b></td><td>", Esc(Str(i, "kind")),
      "</td><td>", Badge(sev, KnownClass(sev)), "</td><td class=\"n\">",
      Count(Int(Get(i, "rows"))), "</td><td title=\"", Esc(first), "\">",
      Esc(ShortTime(first, started)), "</td><td title=\"", Esc(last), "\">",
      Esc(ShortTime(last, started)), "</td><td class=\"n\">",
      Count(Arr(i, "requests").size()), "</td><td>", Esc(Str(i, "detector")),
      "<br><span class=\"small nw\">", Esc(Str(i, "id")), "</span></td><td>",
      Esc(Str(i, "summary")), "</td></tr>");
}

void AppendIncidents(const json& r, std::string* out) {
  if (!Get(r, "incidents").is_array()) return;
  const json& incidents = Arr(r, "incidents");
  absl::StrAppend(out, "<section><h2>Incidents (", Count(incidents.size()),
                  ")</h2>");
  if (incidents.empty()) {
    absl::StrAppend(out, "<p>No incidents.</p></section>\n");
    return;
  }
  std::vector<const json*> sorted;
  for (const json& i : incidents) sorted.push_back(&i);
  std::stable_sort(
      sorted.begin(), sorted.end(), [](const json* a, const json* b) {
        const int ra = SeverityRank(Str(*a, "severity"));
        const int rb = SeverityRank(Str(*b, "severity"));
        return ra != rb ? ra < rb : Int(Get(*a, "rows")) > Int(Get(*b, "rows"));
      });
  absl::StrAppend(
      out,
      "<p class=\"small caption\">Writer: whose data was exposed; "
      "reader: who got it. Worst first.</p>"
      "<table><tr><th>Writer</th><th>Reader</th><th>Kind</"
      "th><th>Severity</th><th "
      "class=\"n\">Rows</th><th>First seen</th><th>Last "
      "seen</th><th "
      "class=\"n\">Requests</th><th>Detector</th><th>Summary</th></tr>");
  const std::string started = Str(r, "started_at");
  for (size_t k = 0; k < sorted.size() && k < kMaxIncidentRows; ++k) {
    AppendIncidentRow(*sorted[k], started, out);
  }
  if (sorted.size() > kMaxIncidentRows) {
    absl::StrAppend(out, "<tr><td colspan=\"10\" class=\"more\">and ",
                    Count(sorted.size() - kMaxIncidentRows),
                    " more incidents (all in the JSON result)</td></tr>");
  }
  absl::StrAppend(out, "</table></section>\n");
}

void AppendControlsAndTrace(const json& r, std::string* out) {
  const json& controls = Get(r, "positive_controls");
  if (controls.is_object()) {
    absl::StrAppend(
        out, "<section><h2>Positive controls</h2><ul class=\"controls\">");
    for (const auto& [name, fired] : controls.items()) {
      const bool ok = fired == true;
      absl::StrAppend(out, "<li class=\"", ok ? "fired" : "silent", "\">",
                      Esc(name), ok ? ": fired" : ": did not fire", "</li>");
    }
    absl::StrAppend(out, "</ul></section>\n");
  }
  if (!Get(r, "trace_nodes").is_array()) return;
  absl::StrAppend(out, "<section><h2>Trace nodes</h2>");
  if (Arr(r, "trace_nodes").empty()) {
    absl::StrAppend(out, "<p>None: black-box detectors only.</p></section>\n");
    return;
  }
  absl::StrAppend(out,
                  "<table><tr><th>Node</th><th class=\"n\">Events</th><th "
                  "class=\"n\">Dropped</th><th class=\"n\">Reads checked</th>"
                  "<th class=\"n\">Reads unchecked</th></tr>");
  for (const json& node : Arr(r, "trace_nodes")) {
    const int64_t dropped = Int(Get(node, "dropped"));
    absl::StrAppend(out, "<tr><td>", Esc(Str(node, "url")),
                    "</td><td class=\"n\">", Count(Int(Get(node, "events"))),
                    "</td><td class=\"n", dropped > 0 ? " low" : "", "\">",
                    Count(dropped), "</td><td class=\"n\">",
                    Count(Int(Get(node, "reads_checked"))),
                    "</td><td class=\"n\">",
                    Count(Int(Get(node, "reads_unchecked"))), "</td></tr>");
  }
  absl::StrAppend(out, "</table></section>\n");
}

}  // namespace

std::string HtmlReport(const json& result) {
  std::string out = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>kvcanary ",
      Esc(Str(result, "verdict")), " ", Esc(Str(result, "campaign")),
      "</title><style>", kCss, "</style></head><body><main>\n");
  AppendBanner(result, &out);
  AppendSummary(result, &out);
  AppendChecks(result, &out);
  AppendDetails(result, &out);
  AppendCoverage(result, &out);
  AppendSpend(result, &out);
  AppendIncidents(result, &out);
  AppendHtmlTimeline(result, &out);
  AppendControlsAndTrace(result, &out);
  absl::StrAppend(&out, "<footer>kvcanary campaign result, schema version ",
                  Esc(Str(result, "schema_version")),
                  ". Complete data: the JSON result; raw rows: the evidence "
                  "store.</footer>\n</main></body></html>\n");
  return out;
}

}  // namespace kvcanary::auditor
