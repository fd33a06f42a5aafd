#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/reports/report.h"
#include "auditor/reports/report_util.h"

namespace kvcanary::auditor {
namespace {

using nlohmann::json;
using report_internal::Arr;
using report_internal::BelowFloor;
using report_internal::Count;
using report_internal::CoverageLine;
using report_internal::Esc;
using report_internal::Get;
using report_internal::Int;
using report_internal::Names;
using report_internal::Num;
using report_internal::Str;
using report_internal::TenantOrDash;
using report_internal::Text;

// ---- JUnit.

struct JunitCase {
  std::string classname, name;
  enum Outcome { kPass, kFailure, kError, kSkipped } outcome = kPass;
  std::string type = "", message = "";
  std::string body = "";  // the failure or error text, or the system-out
};

JunitCase FailureCase(std::string classname, std::string name,
                      const std::vector<const json*>& incidents) {
  JunitCase c{std::move(classname), std::move(name), JunitCase::kFailure,
              "findings"};
  std::vector<std::string> heads;
  for (const json* i : incidents) {
    const std::string line = absl::StrCat(
        Str(*i, "kind"), " (", Str(*i, "severity"), ", writer ",
        TenantOrDash(*i, "writer"), ", reader ", TenantOrDash(*i, "reader"),
        ", ", Count(Int(Get(*i, "rows"))), " rows)");
    if (heads.size() < 3) heads.push_back(line);
    absl::StrAppend(&c.body, Str(*i, "id"), " ", line, ": ", Str(*i, "summary"),
                    "\n");
  }
  c.message = absl::StrCat(
      incidents.size(), incidents.size() == 1 ? " incident: " : " incidents: ",
      absl::StrJoin(heads, "; "), incidents.size() > 3 ? "; ..." : "");
  return c;
}

// The case of one detector for one tenant. Precedence: findings, then
// inconclusive, then disabled, then below floor, then pass.
JunitCase DetectorCase(const json& d, const std::string& tenant,
                       const json& incidents) {
  const std::string name = Str(d, "name");
  const std::string classname = absl::StrCat("kvcanary.", name);
  std::vector<const json*> mine;
  for (const json& i : incidents) {
    if (Str(i, "detector") == name && Names(i, tenant)) mine.push_back(&i);
  }
  if (!mine.empty()) return FailureCase(classname, tenant, mine);
  const std::string state = Str(d, "state"), reason = Str(d, "reason");
  const bool required = Get(d, "required") != false;  // absent: required
  if (state == "inconclusive" && required) {
    return {classname,
            tenant,
            JunitCase::kError,
            "inconclusive",
            reason.empty() ? "inconclusive" : reason,
            CoverageLine(d, tenant)};
  }
  if (state == "inconclusive" || state == "disabled") {
    return {classname, tenant, JunitCase::kSkipped, "",
            absl::StrCat(state == "inconclusive" ? "not required: " : "",
                         reason.empty() ? state : reason)};
  }
  if (required && BelowFloor(d, tenant)) {
    const std::string line = CoverageLine(d, tenant);
    return {classname, tenant, JunitCase::kError, "inconclusive", line, line};
  }
  JunitCase pass{classname, tenant};
  pass.body = CoverageLine(d, tenant);
  for (const json& n : Arr(d, "notes"))
    absl::StrAppend(&pass.body, "\n", Text(n));
  return pass;
}

// A command that states its checks (accept: a length and a check) gets a
// case per check.
std::vector<JunitCase> CheckCases(const json& r) {
  std::vector<JunitCase> cases;
  for (const json& c : Arr(r, "checks")) {
    const std::string state = Str(c, "state");
    const std::string classname =
        absl::StrCat("kvcanary.", Str(r, "command"), ".", Str(c, "check"));
    const std::string message = Str(c, "message");
    if (state == "failed") {
      cases.push_back({classname, Str(c, "subject"), JunitCase::kFailure,
                       "findings", message, message});
    } else if (state == "error") {
      cases.push_back({classname, Str(c, "subject"), JunitCase::kError,
                       "inconclusive", message, message});
    } else if (state == "skipped") {
      cases.push_back({classname, Str(c, "subject"), JunitCase::kSkipped,
                       "skipped", message, ""});
    } else {
      cases.push_back(
          {classname, Str(c, "subject"), JunitCase::kPass, "", "", message});
    }
  }
  return cases;
}

std::vector<JunitCase> JunitCases(const json& r) {
  const std::string verdict = Str(r, "verdict");
  std::vector<std::string> reasons;
  for (const json& x : Arr(r, "reasons")) reasons.push_back(Text(x));
  if (verdict == "error") {
    return {{"kvcanary.campaign", "campaign", JunitCase::kError, "error",
             reasons.empty() ? "error" : reasons[0],
             absl::StrJoin(reasons, "\n")}};
  }
  std::vector<JunitCase> cases = CheckCases(r);
  const json& incidents = Arr(r, "incidents");
  std::vector<bool> placed(incidents.size(), false);
  for (const json& d : Arr(r, "detectors")) {
    if (!Arr(r, "checks").empty()) break;  // the checks stand for them
    for (const json& t : Arr(r, "tenants")) {
      cases.push_back(DetectorCase(d, Text(t), incidents));
      for (size_t i = 0; i < incidents.size(); ++i) {
        placed[i] =
            placed[i] || (Str(incidents[i], "detector") == Str(d, "name") &&
                          Names(incidents[i], Text(t)));
      }
    }
  }
  // Incidents no detector x tenant case holds still fail the suite.
  std::vector<std::string> order;
  for (size_t i = 0; i < incidents.size(); ++i) {
    const std::string d = Str(incidents[i], "detector");
    if (!placed[i] && std::find(order.begin(), order.end(), d) == order.end()) {
      order.push_back(d);
    }
  }
  for (const std::string& d : order) {
    std::vector<const json*> rest;
    for (size_t i = 0; i < incidents.size(); ++i) {
      if (!placed[i] && Str(incidents[i], "detector") == d)
        rest.push_back(&incidents[i]);
    }
    cases.push_back(
        FailureCase(absl::StrCat("kvcanary.", d), "unattributed", rest));
  }
  // An error beside the findings (the run stopped before its end): a CI
  // gate sees both.
  if (const json& e = Get(r, "error"); e.is_object()) {
    const std::string message = Str(e, "message");
    cases.push_back({"kvcanary.campaign", "campaign", JunitCase::kError,
                     "error", message.empty() ? "error" : message,
                     absl::StrCat(message, "\n(", Str(e, "phase"),
                                  " phase; the findings were proven before "
                                  "it)")});
  }
  // A verdict the cases do not show yet gets a case of its own.
  const auto has = [&](JunitCase::Outcome o) {
    return std::any_of(cases.begin(), cases.end(),
                       [o](const JunitCase& c) { return c.outcome == o; });
  };
  const std::string why = absl::StrJoin(reasons, "; ");
  if (verdict == "findings" && !has(JunitCase::kFailure)) {
    cases.push_back({"kvcanary.campaign", "verdict", JunitCase::kFailure,
                     "findings", why, absl::StrJoin(reasons, "\n")});
  } else if (verdict != "clean" && verdict != "findings" &&
             !has(JunitCase::kError) && !has(JunitCase::kFailure)) {
    cases.push_back({"kvcanary.campaign", "verdict", JunitCase::kError,
                     verdict.empty() ? "unknown" : verdict, why,
                     absl::StrJoin(reasons, "\n")});
  }
  return cases;
}

void AppendJunitCase(const JunitCase& c, std::string* out) {
  absl::StrAppend(out, "    <testcase classname=\"", Esc(c.classname),
                  "\" name=\"", Esc(c.name), "\" time=\"0\">\n");
  switch (c.outcome) {
    case JunitCase::kPass:
      absl::StrAppend(out, "      <system-out>", Esc(c.body, true),
                      "</system-out>\n");
      break;
    case JunitCase::kSkipped:
      absl::StrAppend(out, "      <skipped message=\"", Esc(c.message),
                      "\"/>\n");
      break;
    case JunitCase::kFailure:
    case JunitCase::kError: {
      const char* tag = c.outcome == JunitCase::kFailure ? "failure" : "error";
      absl::StrAppend(out, "      <", tag, " type=\"", Esc(c.type),
                      "\" message=\"", Esc(c.message), "\">", Esc(c.body, true),
                      "</", tag, ">\n");
      break;
    }
  }
  absl::StrAppend(out, "    </testcase>\n");
}

}  // namespace

std::string JunitXml(const json& result) {
  const std::vector<JunitCase> cases = JunitCases(result);
  int counts[4] = {0, 0, 0, 0};
  for (const JunitCase& c : cases) ++counts[c.outcome];
  const std::string totals = absl::StrCat(
      "tests=\"", cases.size(), "\" failures=\"", counts[JunitCase::kFailure],
      "\" errors=\"", counts[JunitCase::kError], "\" skipped=\"",
      counts[JunitCase::kSkipped], "\" time=\"",
      absl::StrFormat("%.3f", Num(Get(result, "elapsed_s"))), "\"");
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppend(&out, "<testsuites name=\"kvcanary\" ", totals, ">\n");
  absl::StrAppend(&out, "  <testsuite name=\"",
                  Esc(absl::StrCat("kvcanary.", Str(result, "campaign"))),
                  "\" ", totals, " timestamp=\"",
                  Esc(Str(result, "started_at")), "\">\n    <properties>\n");
  for (const char* key : {"command", "verdict", "exit_code", "target", "model",
                          "api", "schema_version", "ended_at"}) {
    if (Get(result, key).is_null()) continue;
    absl::StrAppend(&out, "      <property name=\"", key, "\" value=\"",
                    Esc(Str(result, key)), "\"/>\n");
  }
  absl::StrAppend(&out, "    </properties>\n");
  for (const JunitCase& c : cases) AppendJunitCase(c, &out);
  std::string summary = absl::StrCat("verdict ", Str(result, "verdict"),
                                     " (exit ", Str(result, "exit_code"), ")");
  for (const json& x : Arr(result, "reasons"))
    absl::StrAppend(&summary, "\n", Text(x));
  if (const json& e = Get(result, "error");
      e.is_object() && Str(result, "verdict") != "error") {
    absl::StrAppend(&summary, "\nerror: ", Str(e, "message"));
  }
  absl::StrAppend(&out, "    <system-out>", Esc(summary, true),
                  "</system-out>\n  </testsuite>\n</testsuites>\n");
  return out;
}

}  // namespace kvcanary::auditor
