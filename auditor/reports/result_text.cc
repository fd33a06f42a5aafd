#include "auditor/reports/result_text.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "auditor/result/incidents.h"
#include "common/text_table.h"

namespace kvcanary::auditor {

// The detector table: state, floor and coverage side by side.
std::string DetectorTable(const std::vector<DetectorCoverage>& detectors) {
  TextTable table({{"DETECTOR", TextTable::kLeft, 12},
                   {"STATE", TextTable::kLeft, 13},
                   {"FLOOR", TextTable::kLeft, 5},
                   {"REQUIRED", TextTable::kLeft, 8},
                   {"COVERAGE"}},
                  TextTable::Plain(1));
  for (const DetectorCoverage& d : detectors) {
    table.AddRow({d.name, DetectorStateName(d.state), absl::StrCat(d.floor),
                  d.required ? "yes" : "no",
                  d.coverage.empty()
                      ? std::string("-")
                      : absl::StrCat(d.CoverageText(), " (", d.unit, ")")});
    if (!d.reason.empty()) table.AddNote(1, d.reason);
    for (const std::string& n : d.notes) table.AddNote(1, "note: " + n);
  }
  return table.ToString();
}

namespace {

// A command's own results, one line each: its details' plain fields, and
// the checks that did not pass.
void AppendCommandDetails(const CampaignResult& r, int max_lines,
                          std::string* out) {
  for (const auto& [key, value] : r.details.items()) {
    if (value.is_object() || value.is_array()) continue;
    absl::StrAppendFormat(out, "%s: %s\n", key.c_str(),
                          value.is_string() ? value.get<std::string>().c_str()
                                            : value.dump().c_str());
  }
  if (!r.detectors.empty()) {
    absl::StrAppendFormat(out, "%s", DetectorTable(r.detectors).c_str());
  }
  int passed = 0, skipped = 0, shown = 0;
  TextTable failed({{"", TextTable::kLeft, 7},
                    {"", TextTable::kLeft, 14},
                    {"", TextTable::kLeft, 28},
                    {""}},
                   TextTable::Plain(1, "  "));
  for (const Check& c : r.checks) {
    if (c.state == "passed" || c.state == "skipped") {
      passed += c.state == "passed";
      skipped += c.state == "skipped";
      continue;
    }
    if (shown++ < max_lines) {
      failed.AddRow({c.state, c.check, c.subject, c.message});
    }
  }
  absl::StrAppend(out, failed.ToString());
  if (!r.checks.empty()) {
    absl::StrAppendFormat(
        out, "checks: %zu: %d passed, %d skipped, %zu failed or in error%s\n",
        r.checks.size(), passed, skipped, r.checks.size() - passed - skipped,
        shown > max_lines ? " (more in the reports)" : "");
  }
}

}  // namespace

// What the command spent per tenant, and its budget.
std::string SpendText(const CampaignResult& r) {
  if (r.spend.empty()) return "";
  std::string out = absl::StrCat("tokens: ", r.spent_tokens, " spent");
  if (r.budget_tokens > 0) {
    absl::StrAppend(&out, " of a ", r.budget_tokens, "-token budget",
                    r.budget_reached ? " (reached: new probes stopped)" : "");
  }
  if (r.rate_cuts > 0) {
    absl::StrAppend(&out, "; sending rate cut ", r.rate_cuts,
                    r.rate_cuts == 1 ? " time" : " times", " for 429/503");
  }
  absl::StrAppend(&out, "\n");
  TextTable table({{"TENANT", TextTable::kLeft, 10},
                   {"PROMPT", TextTable::kRight},
                   {"CACHED", TextTable::kRight},
                   {"COMPLETION", TextTable::kRight},
                   {"RATE-LIMITED", TextTable::kRight},
                   {"RETRIES", TextTable::kRight}},
                  TextTable::Plain(1));
  for (const auto& [tenant, s] : r.spend) {
    table.AddRow({tenant, absl::StrCat(s.prompt_tokens),
                  absl::StrCat(s.cached_tokens),
                  absl::StrCat(s.completion_tokens),
                  absl::StrCat(s.rate_limited), absl::StrCat(s.retries)});
    if (s.unreported > 0) {
      table.AddNote(
          1, absl::StrCat(s.unreported, " answers without usage, not counted"));
    }
  }
  return out + table.ToString();
}

namespace {
// ", over chat completions" where the result names its API.
std::string ApiSuffix(const CampaignResult& r) {
  if (r.api.empty()) return "";
  return absl::StrCat(
      ", over ", r.api == "chat" ? "chat completions" : "text completions");
}
}  // namespace

std::string ResultText(const CampaignResult& r, int max_lines) {
  std::string text;
  std::string* out = &text;
  if (r.command == "probe") {
    absl::StrAppendFormat(
        out,
        "campaign %s: %s (exit %d): %lld probes (%lld usable), %zu finding "
        "rows in %zu incidents, %.1f s%s\n",
        r.campaign_id.c_str(), VerdictName(r.verdict), r.exit_code(),
        static_cast<long long>(r.probes), static_cast<long long>(r.usable),
        r.findings.size(), r.incidents.size(), absl::ToDoubleSeconds(r.elapsed),
        ApiSuffix(r).c_str());
  } else {
    absl::StrAppendFormat(
        out,
        "%s %s: %s (exit %d): %zu finding rows in %zu incidents, %.1f s%s\n",
        r.command.c_str(), r.campaign_id.c_str(), VerdictName(r.verdict),
        r.exit_code(), r.findings.size(), r.incidents.size(),
        absl::ToDoubleSeconds(r.elapsed), ApiSuffix(r).c_str());
    AppendCommandDetails(r, max_lines, out);
  }
  if (r.command == "probe" && !r.detectors.empty()) {
    absl::StrAppendFormat(out, "limit: %d prompt tokens (%s: %s)\n",
                          r.limit.prompt_tokens, r.limit.source.c_str(),
                          r.limit.where.c_str());
    absl::StrAppendFormat(
        out,
        "plants: %s form, %d markers each, %d prompt tokens (%.0f%% of the "
        "limit); %lld of %lld accepted whole\n",
        r.plants.form.empty() ? "none" : r.plants.form.c_str(),
        r.plants.markers_per_plant, r.plants.prompt_tokens, r.plants.fill * 100,
        static_cast<long long>(r.plants.accepted_whole),
        static_cast<long long>(r.plants.sent));
    absl::StrAppendFormat(out, "positive controls:");
    for (const auto& [d, passed] : r.positive_controls)
      absl::StrAppendFormat(out, " %s=%s", d.c_str(),
                            passed ? "passed" : "FAILED");
    absl::StrAppendFormat(out, "\n%s", DetectorTable(r.detectors).c_str());
  }
  absl::StrAppend(out, SpendText(r));
  for (const TraceNodeStats& n : r.trace_nodes) {
    absl::StrAppendFormat(
        out,
        "trace %s: %llu events, %llu dropped, %llu reads checked, %llu "
        "unchecked\n",
        n.url.c_str(), static_cast<unsigned long long>(n.events),
        static_cast<unsigned long long>(n.dropped),
        static_cast<unsigned long long>(n.reads_checked),
        static_cast<unsigned long long>(n.reads_unchecked));
  }
  if (!r.incidents.empty()) {
    absl::StrAppendFormat(out, "%s",
                          IncidentTable(r.incidents, max_lines).c_str());
  }
  if (!r.reasons.empty() && r.verdict != Verdict::kClean) {
    absl::StrAppendFormat(out, "%s because:\n", VerdictName(r.verdict));
    for (const std::string& why : r.reasons) {
      absl::StrAppendFormat(out, "  - %s\n", why.c_str());
    }
  }
  if (!r.error.empty() && r.verdict != Verdict::kError) {
    // Findings outrank the error (auditor/result/coverage.h): both shown.
    absl::StrAppendFormat(
        out,
        "error: %s\n  (the run stopped before its end; the findings above "
        "were proven before it)\n",
        r.error.c_str());
  }
  if (!r.db_path.empty() && r.verdict != Verdict::kError) {
    absl::StrAppendFormat(
        out, "details: kvcanary-auditor findings --db %s --campaign %s\n",
        r.db_path.c_str(), r.campaign_id.c_str());
  }
  return text;
}

}  // namespace kvcanary::auditor
