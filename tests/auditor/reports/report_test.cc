// Campaign result documents against docs/campaign-result.schema.json (with
// Debian's python3-jsonschema), their JUnit XML (parsed by python3's
// xml.etree) and their HTML page (rendered by headless Chromium).
#include "auditor/reports/report.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {
namespace {

using nlohmann::json;

const std::string kSchema =
    std::string(KVCANARY_SOURCE_DIR) + "/docs/campaign-result.schema.json";

// ---- Sample documents, as a campaign against stories260K would write them.

json CleanResult() {
  return json::parse(R"({
  "schema": "kvcanary-campaign-result", "schema_version": 3,
  "campaign": "c20261203T101500-1a2b3c4d",
  "target": "http://127.0.0.1:8000", "api": "completions",
  "model": "stories260K",
  "started_at": "2026-12-03T10:15:00.123Z", "ended_at": "2026-12-03T10:15:12.623Z",
  "elapsed_s": 12.5, "verdict": "clean", "exit_code": 0, "reasons": [],
  "error": null,
  "tenants": ["acme", "globex", "initech", "umbrella"],
  "limit": {"prompt_tokens": 256, "context_tokens": 512, "source": "advertised",
            "where": "/v1/models data[0].max_prompt_tokens"},
  "plants": {"form": "story", "markers_per_plant": 2, "prompt_tokens": 233, "fill": 0.91,
             "sent": 120, "accepted_whole": 118},
  "probes": {"sent": 612, "usable": 600,
             "by_kind": {"plant": 120, "sniff": 300, "golden": 60, "echo": 60,
                         "boundary": 69, "quiet": 3},
             "by_outcome": {"ok": 600, "http_4xx": 12, "rate_limited": 2}},
  "spend": {"tokens": 151200, "budget_tokens": 200000, "budget_reached": false,
            "rate_cuts": 3,
            "tenants": {"acme": {"prompt_tokens": 40100, "cached_tokens": 1200,
                                 "completion_tokens": 3900, "unreported_answers": 0,
                                 "rate_limited": 2, "retries": 2},
                        "globex": {"prompt_tokens": 98000, "cached_tokens": 0,
                                   "completion_tokens": 9200, "unreported_answers": 0,
                                   "rate_limited": 0, "retries": 0}}},
  "positive_controls": {"output_scan": true, "golden": true, "echo": true,
                        "boundary": true, "latency": true, "trace": true},
  "detectors": [
    {"name": "output_scan", "required": true, "state": "active", "reason": "",
     "floor": 20, "unit": "plants accepted whole",
     "coverage": {"acme": 31, "globex": 30, "initech": 29, "umbrella": 28},
     "notes": [], "findings": 0, "stats": {"completions_scanned": 600}},
    {"name": "golden", "required": true, "state": "active", "reason": "",
     "floor": 10, "unit": "golden answers compared",
     "coverage": {"acme": 15, "globex": 15, "initech": 15, "umbrella": 15},
     "notes": ["exact mode: every golden prompt agreed with itself alone"],
     "findings": 0, "stats": {"variants": 3}},
    {"name": "echo", "required": true, "state": "active", "reason": "",
     "floor": 10, "unit": "echo answers",
     "coverage": {"acme": 15, "globex": 14, "initech": 16, "umbrella": 15},
     "notes": [], "findings": 0, "stats": {}},
    {"name": "boundary", "required": true, "state": "active", "reason": "",
     "floor": 3, "unit": "past-limit prompts refused",
     "coverage": {"acme": 17, "globex": 18, "initech": 17, "umbrella": 17},
     "notes": [], "findings": 0,
     "stats": {"limit_source": "advertised", "at_limit": 23, "past_limit": 46}},
    {"name": "latency", "required": false, "state": "active", "reason": "",
     "floor": 0, "unit": "quiet first-token times",
     "coverage": {"acme": 1, "globex": 1, "initech": 1, "umbrella": 0},
     "notes": ["prefill 98.5 us/token, r2 0.97"], "findings": 0,
     "stats": {"calibrated": true, "per_token_us": 98.5, "r2": 0.97,
               "lengths": [1, 233]}},
    {"name": "trace", "required": true, "state": "active", "reason": "",
     "floor": 20, "unit": "page reads checked",
     "coverage": {"acme": 310, "globex": 305, "initech": 298, "umbrella": 321},
     "notes": [], "findings": 0, "stats": {"reads_checked": 1234, "dropped": 0}}
  ],
  "incidents": [],
  "findings": {"total": 0, "by_kind": {}},
  "timeline": {"bucket_s": 1.0,
               "probes": [20, 48, 52, 50, 49, 51, 50, 53, 48, 50, 52, 49, 40],
               "errors": [0, 1, 0, 2, 1, 0, 1, 3, 0, 2, 1, 1, 0],
               "findings": [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]},
  "trace_nodes": [
    {"url": "http://127.0.0.1:8101", "events": 5120, "dropped": 0,
     "reads_checked": 0, "reads_unchecked": 0},
    {"url": "http://127.0.0.1:8102", "events": 9822, "dropped": 0,
     "reads_checked": 1234, "reads_unchecked": 0}],
  "evidence": {"db": "/var/lib/kvcanary/evidence.db", "first_seq": 1,
               "last_seq": 800}
})");
}

json Incident(const std::string& id, const std::string& detector,
              const std::string& kind, const std::string& severity,
              const json& writer, const json& reader, int rows,
              const std::string& summary) {
  json tenants = json::array();
  if (!writer.is_null()) tenants.push_back(writer);
  if (!reader.is_null() && reader != writer) tenants.push_back(reader);
  return {{"id", id},
          {"detector", detector},
          {"kind", kind},
          {"kinds", {{kind, rows}}},
          {"severity", severity},
          {"writer", writer},
          {"reader", reader},
          {"tenants", tenants},
          {"key", {{"node", "decode"}}},
          {"first_seen", "2026-12-03T10:15:02.410Z"},
          {"last_seen", "2026-12-03T10:15:11.902Z"},
          {"first_seen_us", 1796292902410000},
          {"last_seen_us", 1796292911902000},
          {"rows", rows},
          {"requests", {12, 17, 23}},
          {"probes", {3, 9}},
          {"pages", {4, 5, 6}},
          {"summary", summary}};
}

json FindingsResult() {
  json r = CleanResult();
  r["verdict"] = "findings";
  r["exit_code"] = 1;
  r["reasons"] = {
      "trace: globex's pages read by acme on decode (3,000 rows, critical)",
      "echo: 7 answers of umbrella without the nonce",
      "boundary: 2 prompts past the limit accepted for initech"};
  r["incidents"] = {
      Incident("i-3f2a9c01", "trace", "trace_foreign_tenant_read", "critical",
               "globex", "acme", 3000,
               "acme's decode read page slots written by globex"),
      Incident("i-5b7e0d12", "trace", "trace_stale_request_read", "high",
               "acme", "acme", 203, "acme read an earlier request's pages"),
      Incident("i-9c4d1e33", "echo", "echo_failure", "high", nullptr,
               "umbrella", 7, "umbrella's nonce missing from 7 answers"),
      Incident("i-77aa0b44", "boundary", "boundary_accepted", "high", nullptr,
               "initech", 2, "a 300-token prompt got 200 with a 256 limit")};
  r["findings"] = {{"total", 3212},
                   {"by_kind",
                    {{"trace_foreign_tenant_read", 3000},
                     {"trace_stale_request_read", 203},
                     {"echo_failure", 7},
                     {"boundary_accepted", 2}}}};
  r["detectors"][5]["findings"] = 3203;
  r["detectors"][2]["findings"] = 7;
  r["detectors"][3]["findings"] = 2;
  json& latency = r["detectors"][4];
  latency["state"] = "disabled";
  latency["reason"] = "disabled: prefill rate not calibrated (r2 0.41)";
  r["timeline"]["findings"] = {0,   0, 120, 410, 380, 402, 0,
                               395, 1, 500, 390, 412, 202};
  return r;
}

json InconclusiveResult() {
  json r = CleanResult();
  r["verdict"] = "inconclusive";
  r["exit_code"] = 3;
  const std::string why = "echo: tenant globex has 13 usable answers, floor 20";
  r["reasons"] = {why};
  json& echo = r["detectors"][2];
  echo["state"] = "inconclusive";
  echo["reason"] = why;
  echo["floor"] = 20;
  echo["coverage"] = {
      {"acme", 21}, {"globex", 13}, {"initech", 22}, {"umbrella", 20}};
  return r;
}

// An error result as small as the schema allows: the nine core fields.
json ErrorResult() {
  return json::parse(R"({
  "schema": "kvcanary-campaign-result", "schema_version": 3, "campaign": "",
  "target": "http://127.0.0.1:8000", "api": null, "verdict": "error",
  "exit_code": 2,
  "reasons": ["GET /v1/models: 401 Unauthorized for tenant acme"],
  "error": {"message": "GET /v1/models: 401 Unauthorized for tenant acme",
            "phase": "start"},
  "started_at": "2026-12-03T10:15:00.123Z"})");
}

// Findings proven before the target died: the findings verdict, the error
// beside it, and no detector vouched for (the run did not finish).
json FindingsThenErrorResult() {
  json r = FindingsResult();
  r["error"] = {{"message",
                 "target down at 2026-12-03T10:15:11Z: 20 requests in a row "
                 "without an HTTP answer (connection refused)"},
                {"phase", "audit"}};
  r["detectors"] = json::array();
  r["reasons"] = {"3212 finding rows"};
  return r;
}

// An error result that got as far as naming its tenants and evidence store.
json LateErrorResult() {
  json r = ErrorResult();
  r["error"]["phase"] = "audit";
  r["campaign"] = "c20261203T101500-1a2b3c4d";
  r["ended_at"] = "2026-12-03T10:15:01.001Z";
  r["elapsed_s"] = 0.878;
  r["tenants"] = {"acme", "globex"};
  r["evidence"] = {{"db", "/var/lib/kvcanary/evidence.db"}};
  return r;
}

// ---- Running the real tools.

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "kvcanary_report_" + std::to_string(getpid()) +
         "_" + name;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `cmd` under sh; its stdout into *out, stderr dropped. The exit code.
int Shell(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
    if (out != nullptr) out->append(buf, n);
  }
  const int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// Debian's python3 first (python3-jsonschema lives there), then PATH's.
std::string PythonWith(const std::string& module) {
  for (const char* py : {"/usr/bin/python3", "python3"}) {
    if (Shell(std::string(py) + " -c 'import " + module + "'") == 0) return py;
  }
  return "";
}

// Validates `doc` against the schema; the validator's messages in *errors.
// Returns 0 valid, 1 invalid, anything else: the validator did not run.
int Validate(const json& doc, std::string* errors) {
  static const std::string python = PythonWith("jsonschema");
  const std::string path = TempPath("doc.json");
  WriteFile(path, doc.dump(2));
  return Shell(python + R"py( -c 'import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
errors = list(jsonschema.Draft202012Validator(schema).iter_errors(json.load(open(sys.argv[2]))))
for e in errors: print("/".join(map(str, e.absolute_path)) or "(root)", e.message)
sys.exit(1 if errors else 0)' )py" +
                   kSchema + " " + path,
               errors);
}

#define SKIP_WITHOUT_JSONSCHEMA()                          \
  if (PythonWith("jsonschema").empty())                    \
  GTEST_SKIP() << "python3 with jsonschema not installed " \
                  "(apt-get install python3-jsonschema); schema not checked"

TEST(CampaignResultSchemaTest, SampleResultsOfEveryVerdictAreValid) {
  SKIP_WITHOUT_JSONSCHEMA();
  for (const json& doc :
       {CleanResult(), FindingsResult(), InconclusiveResult(), ErrorResult(),
        LateErrorResult(), FindingsThenErrorResult()}) {
    std::string errors;
    EXPECT_EQ(Validate(doc, &errors), 0)
        << doc["verdict"] << " result rejected:\n"
        << errors;
  }
}

TEST(CampaignResultSchemaTest, RejectsAnUnknownVerdict) {
  SKIP_WITHOUT_JSONSCHEMA();
  json doc = CleanResult();
  doc["verdict"] = "maybe";
  std::string errors;
  EXPECT_EQ(Validate(doc, &errors), 1);
  EXPECT_NE(errors.find("'maybe' is not one of"), std::string::npos) << errors;
}

TEST(CampaignResultSchemaTest, RejectsACleanResultWithoutDetectors) {
  SKIP_WITHOUT_JSONSCHEMA();
  json doc = CleanResult();
  doc.erase("detectors");
  std::string errors;
  EXPECT_EQ(Validate(doc, &errors), 1);
  EXPECT_NE(errors.find("'detectors' is a required property"),
            std::string::npos)
      << errors;
}

TEST(CampaignResultSchemaTest, RejectsVerdictsThatContradictTheirContent) {
  SKIP_WITHOUT_JSONSCHEMA();
  json wrong_exit = CleanResult();
  wrong_exit["exit_code"] = 1;
  json clean_with_inconclusive = CleanResult();
  clean_with_inconclusive["detectors"][0]["state"] = "inconclusive";
  clean_with_inconclusive["detectors"][0]["reason"] = "0 plants";
  json clean_with_incident = CleanResult();
  clean_with_incident["incidents"] = FindingsResult()["incidents"];
  json findings_without_incidents = FindingsResult();
  findings_without_incidents["incidents"] = json::array();
  json error_without_reason = ErrorResult();
  error_without_reason["reasons"] = json::array();
  for (const json& doc :
       {wrong_exit, clean_with_inconclusive, clean_with_incident,
        findings_without_incidents, error_without_reason}) {
    std::string errors;
    EXPECT_EQ(Validate(doc, &errors), 1) << doc.dump().substr(0, 300);
  }
}

// `error` beside the verdict: findings may carry one from the audit,
// clean and inconclusive none, error always one; an error before the
// audit's first probe ("start") is verdict error whatever else.
TEST(CampaignResultSchemaTest, RejectsAnErrorTheVerdictContradicts) {
  SKIP_WITHOUT_JSONSCHEMA();
  json clean_with_error = CleanResult();
  clean_with_error["error"] = FindingsThenErrorResult()["error"];
  json inconclusive_with_error = InconclusiveResult();
  inconclusive_with_error["error"] = FindingsThenErrorResult()["error"];
  json findings_after_start_error = FindingsThenErrorResult();
  findings_after_start_error["error"]["phase"] = "start";
  json error_without_error = ErrorResult();
  error_without_error["error"] = nullptr;
  json without_error_field = CleanResult();
  without_error_field.erase("error");
  json unknown_phase = ErrorResult();
  unknown_phase["error"]["phase"] = "later";
  for (const json& doc :
       {clean_with_error, inconclusive_with_error, findings_after_start_error,
        error_without_error, without_error_field, unknown_phase}) {
    std::string errors;
    EXPECT_EQ(Validate(doc, &errors), 1) << doc.dump().substr(0, 400);
  }
}

TEST(CampaignResultSchemaTest, RejectsMistypedFieldsAndUnknownFields) {
  SKIP_WITHOUT_JSONSCHEMA();
  json bad_time = CleanResult();
  bad_time["started_at"] = "2026-12-03 10:15:00";  // not RFC 3339 UTC
  json bad_severity = FindingsResult();
  bad_severity["incidents"][0]["severity"] = "catastrophic";
  json typo = CleanResult();
  typo["exitcode"] = 0;
  json version2 = CleanResult();
  version2["schema_version"] = 2;
  json no_kinds = FindingsResult();
  no_kinds["incidents"][0].erase("kinds");
  json no_api = CleanResult();
  no_api.erase("api");
  json other_api = CleanResult();
  other_api["api"] = "responses";
  for (const json& doc :
       {bad_time, bad_severity, typo, version2, no_kinds, no_api, other_api}) {
    std::string errors;
    EXPECT_EQ(Validate(doc, &errors), 1) << doc.dump().substr(0, 300);
  }
}

// ---- JUnit, parsed by a real XML parser.

// The parsed suite: {"root", "suites": [{"attrs", "cases": [{"classname",
// "name", "outcome" (pass|failure|error|skipped), "type", "message", "text",
// "out"}]}]}. Fails the test (null result) if the XML does not parse.
json ParseJunit(const std::string& xml) {
  static const std::string python = PythonWith("xml.etree.ElementTree");
  const std::string path = TempPath("junit.xml");
  WriteFile(path, xml);
  std::string out;
  const int rc =
      Shell(python + R"py( -c 'import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = []
for s in root.iter("testsuite"):
    cases = []
    for c in s.iter("testcase"):
        o = {"classname": c.get("classname"), "name": c.get("name"), "outcome": "pass"}
        for tag in ("failure", "error", "skipped"):
            e = c.find(tag)
            if e is not None:
                o.update(outcome=tag, type=e.get("type"), message=e.get("message"), text=e.text or "")
        so = c.find("system-out")
        if so is not None: o["out"] = so.text or ""
        cases.append(o)
    suites.append({"attrs": dict(s.attrib), "cases": cases})
print(json.dumps({"root": root.tag, "suites": suites}))' )py" +
                path,
            &out);
  EXPECT_EQ(rc, 0) << "XML did not parse:\n" << xml;
  return rc == 0 ? json::parse(out, nullptr, false) : json();
}

#define SKIP_WITHOUT_PYTHON() \
  if (PythonWith("xml").empty()) GTEST_SKIP() << "python3 not installed"

const json* FindCase(const json& suite, const std::string& classname,
                     const std::string& name) {
  for (const json& c : suite["cases"]) {
    if (c["classname"] == classname && c["name"] == name) return &c;
  }
  return nullptr;
}

TEST(JunitXmlTest, CleanResultPassesEveryDetectorTenantCaseWithCoverage) {
  SKIP_WITHOUT_PYTHON();
  const json parsed = ParseJunit(JunitXml(CleanResult()));
  ASSERT_EQ(parsed["root"], "testsuites");
  ASSERT_EQ(parsed["suites"].size(), 1u);
  const json& suite = parsed["suites"][0];
  EXPECT_EQ(suite["attrs"]["name"], "kvcanary.c20261203T101500-1a2b3c4d");
  EXPECT_EQ(suite["attrs"]["tests"], "24");  // 6 detectors x 4 tenants
  EXPECT_EQ(suite["attrs"]["failures"], "0");
  EXPECT_EQ(suite["attrs"]["errors"], "0");
  EXPECT_EQ(suite["attrs"]["skipped"], "0");
  ASSERT_EQ(suite["cases"].size(), 24u);
  const json* c = FindCase(suite, "kvcanary.output_scan", "acme");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["outcome"], "pass");
  EXPECT_EQ((*c)["out"], "31 plants accepted whole, floor 20");
}

TEST(JunitXmlTest, IncidentsFailTheDetectorCaseOfEveryTenantTheyName) {
  SKIP_WITHOUT_PYTHON();
  const json parsed = ParseJunit(JunitXml(FindingsResult()));
  const json& suite = parsed["suites"][0];
  EXPECT_EQ(suite["attrs"]["tests"], "24");
  // trace: acme (reader of both) and globex (writer); echo: umbrella;
  // boundary: initech.
  EXPECT_EQ(suite["attrs"]["failures"], "4");
  EXPECT_EQ(suite["attrs"]["errors"], "0");
  EXPECT_EQ(suite["attrs"]["skipped"], "4");  // latency, disabled
  const json* acme = FindCase(suite, "kvcanary.trace", "acme");
  ASSERT_NE(acme, nullptr);
  EXPECT_EQ((*acme)["outcome"], "failure");
  EXPECT_EQ((*acme)["type"], "findings");
  EXPECT_EQ((*acme)["message"],
            "2 incidents: trace_foreign_tenant_read (critical, writer globex, "
            "reader acme, 3,000 rows); trace_stale_request_read (high, writer "
            "acme, reader acme, 203 rows)");
  EXPECT_NE((*acme)["text"].get<std::string>().find("i-3f2a9c01"),
            std::string::npos);
  const json* globex = FindCase(suite, "kvcanary.trace", "globex");
  EXPECT_EQ((*globex)["outcome"], "failure");
  EXPECT_EQ((*FindCase(suite, "kvcanary.trace", "initech"))["outcome"], "pass");
  EXPECT_EQ((*FindCase(suite, "kvcanary.echo", "umbrella"))["outcome"],
            "failure");
  const json* latency = FindCase(suite, "kvcanary.latency", "acme");
  EXPECT_EQ((*latency)["outcome"], "skipped");
  EXPECT_EQ((*latency)["message"],
            "disabled: prefill rate not calibrated (r2 0.41)");
}

TEST(JunitXmlTest, InconclusiveDetectorIsAnErrorSoCiGatesFail) {
  SKIP_WITHOUT_PYTHON();
  const json parsed = ParseJunit(JunitXml(InconclusiveResult()));
  const json& suite = parsed["suites"][0];
  EXPECT_EQ(suite["attrs"]["errors"], "4");
  EXPECT_EQ(suite["attrs"]["failures"], "0");
  const json* globex = FindCase(suite, "kvcanary.echo", "globex");
  ASSERT_NE(globex, nullptr);
  EXPECT_EQ((*globex)["outcome"], "error");
  EXPECT_EQ((*globex)["type"], "inconclusive");
  EXPECT_EQ((*globex)["message"],
            "echo: tenant globex has 13 usable answers, floor 20");
  EXPECT_EQ((*globex)["text"], "13 echo answers, floor 20");
}

TEST(JunitXmlTest, ErrorVerdictIsOneErroredCampaignCase) {
  SKIP_WITHOUT_PYTHON();
  const json parsed = ParseJunit(JunitXml(ErrorResult()));
  const json& suite = parsed["suites"][0];
  EXPECT_EQ(suite["attrs"]["name"], "kvcanary.");
  EXPECT_EQ(suite["attrs"]["tests"], "1");
  EXPECT_EQ(suite["attrs"]["errors"], "1");
  ASSERT_EQ(suite["cases"].size(), 1u);
  EXPECT_EQ(suite["cases"][0]["name"], "campaign");
  EXPECT_EQ(suite["cases"][0]["outcome"], "error");
  EXPECT_EQ(suite["cases"][0]["message"],
            "GET /v1/models: 401 Unauthorized for tenant acme");
}

// The target died after findings: the incidents fail their cases (no
// detector vouched for, so they are unattributed) and the error is a case
// of its own, so a CI gate shows both.
TEST(JunitXmlTest, FindingsThenAnErrorFailAndErrorTheSuite) {
  SKIP_WITHOUT_PYTHON();
  const json parsed = ParseJunit(JunitXml(FindingsThenErrorResult()));
  const json& suite = parsed["suites"][0];
  EXPECT_EQ(suite["attrs"]["errors"], "1");
  EXPECT_GE(std::stoi(suite["attrs"]["failures"].get<std::string>()), 1);
  const json* error = FindCase(suite, "kvcanary.campaign", "campaign");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ((*error)["outcome"], "error");
  EXPECT_EQ((*error)["type"], "error");
  EXPECT_EQ((*error)["message"].get<std::string>().rfind("target down at", 0),
            0u);
  const json* trace = FindCase(suite, "kvcanary.trace", "unattributed");
  ASSERT_NE(trace, nullptr);
  EXPECT_EQ((*trace)["outcome"], "failure");
}

TEST(JunitXmlTest, IncidentNamingNoKnownTenantStillFailsTheSuite) {
  SKIP_WITHOUT_PYTHON();
  json r = FindingsResult();
  r["incidents"] = {Incident("i-0000aaaa", "golden", "golden_divergence_rate",
                             "high", nullptr, nullptr, 40,
                             "golden answers diverge under cross-tenant load")};
  const json parsed = ParseJunit(JunitXml(r));
  const json& suite = parsed["suites"][0];
  EXPECT_EQ(suite["attrs"]["tests"], "25");
  EXPECT_EQ(suite["attrs"]["failures"], "1");
  const json* c = FindCase(suite, "kvcanary.golden", "unattributed");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["outcome"], "failure");
}

TEST(JunitXmlTest, HostileStringsAreEscapedAndDisallowedCharactersReplaced) {
  SKIP_WITHOUT_PYTHON();
  const std::string hostile =
      std::string(
          "q\"uote 'apos' <tag attr=\"x\"> & &amp; ]]> ctl\x01\x1b tab\t"
          "nl\ncr\r nul") +
      std::string(1, '\0') + "bad\xff\xfe utf8 \xC3\xA9 \xEF\xBF\xBE end";
  const std::string expected =
      "q\"uote 'apos' <tag attr=\"x\"> & &amp; ]]> ctl\xEF\xBF\xBD\xEF\xBF\xBD "
      "tab\t"
      "nl\ncr\r nul\xEF\xBF\xBD"
      "bad\xEF\xBF\xBD\xEF\xBF\xBD utf8 \xC3\xA9 "
      "\xEF\xBF\xBD end";
  json r = InconclusiveResult();
  r["tenants"][1] = hostile;
  r["detectors"][2]["reason"] = hostile;
  r["detectors"][2]["coverage"][hostile] = 1;
  r["incidents"] = {Incident("i-0000bbbb", "trace", "trace_foreign_tenant_read",
                             "critical", "acme", hostile, 5, hostile)};
  const json parsed = ParseJunit(JunitXml(r));
  ASSERT_TRUE(parsed.is_object());
  // In attributes (name, message).
  const json* c = FindCase(parsed["suites"][0], "kvcanary.echo", expected);
  ASSERT_NE(c, nullptr) << parsed.dump();
  EXPECT_EQ((*c)["message"], expected);
  EXPECT_EQ((*c)["outcome"], "error");
  // In a text node (the failure's incident lines).
  const json* t = FindCase(parsed["suites"][0], "kvcanary.trace", expected);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ((*t)["outcome"], "failure");
  const std::string text = (*t)["text"];
  EXPECT_EQ(text.substr(text.size() - expected.size() - 1), expected + "\n");
}

TEST(JunitXmlTest, MalformedDocumentsRenderWithoutThrowing) {
  for (const json& doc :
       {json(), json::array(), json("text"),
        json::parse(R"({"verdict": 3, "tenants": 5, "detectors": "x",
                        "incidents": [1, null], "reasons": {"a": 1}})")}) {
    EXPECT_NO_THROW({
      const std::string xml = JunitXml(doc);
      EXPECT_EQ(xml.rfind("<?xml", 0), 0u);
    });
    EXPECT_NO_THROW(HtmlReport(doc));
  }
}

// ---- HTML.

// No asset from anywhere but the page itself: no tag refers to a URL with
// a scheme or a host, no script, link or frame, and the CSS imports nothing.
// (Text may mention URLs: it is escaped, so it holds no '<'.)
void ExpectSelfContained(const std::string& html) {
  static const std::regex tag("<[A-Za-z][^>]*>");
  static const std::regex external(
      R"re((src|href|srcset|action|data|poster)\s*=\s*["']?\s*([a-z][a-z0-9+.-]*:|//))re",
      std::regex::icase);
  static const std::regex forbidden("^<(script|link|iframe|object|embed)\\b",
                                    std::regex::icase);
  for (std::sregex_iterator it(html.begin(), html.end(), tag), end; it != end;
       ++it) {
    EXPECT_FALSE(std::regex_search(it->str(), external)) << it->str();
    EXPECT_FALSE(std::regex_search(it->str(), forbidden)) << it->str();
  }
  const size_t css = html.find("<style>");
  ASSERT_NE(css, std::string::npos);
  const std::string style = html.substr(css, html.find("</style>") - css);
  EXPECT_EQ(style.find("url("), std::string::npos);
  EXPECT_EQ(style.find("@import"), std::string::npos);
  EXPECT_EQ(style.find("@font-face"), std::string::npos);
}

TEST(HtmlReportTest, PagesOfEveryVerdictAreSelfContained) {
  for (const json& doc :
       {CleanResult(), FindingsResult(), InconclusiveResult(), ErrorResult()}) {
    const std::string html = HtmlReport(doc);
    EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_NE(
        html.find("class=\"verdict\">" + doc["verdict"].get<std::string>()),
        std::string::npos);
    ExpectSelfContained(html);
  }
}

TEST(HtmlReportTest, FindingsThenAnErrorShowBoth) {
  const std::string html = HtmlReport(FindingsThenErrorResult());
  EXPECT_NE(html.find("class=\"verdict\">findings"), std::string::npos);
  EXPECT_NE(html.find("<b>error:</b> target down at"), std::string::npos);
  EXPECT_NE(html.find("the findings were proven before it"), std::string::npos);
  ExpectSelfContained(html);
}

TEST(HtmlReportTest, EveryStringFromTheDocumentIsEscaped) {
  json r = FindingsResult();
  const std::string evil =
      "<script>alert(1)</script><img src=http://x.invalid/p.png>";
  r["tenants"][0] = evil;
  r["reasons"][0] = evil;
  r["incidents"][0]["writer"] = evil;
  r["incidents"][0]["summary"] = "\"'&" + evil;
  r["detectors"][0]["notes"] = {evil};
  r["trace_nodes"][0]["url"] = evil;
  r["positive_controls"][evil] = true;
  const std::string html = HtmlReport(r);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"),
            std::string::npos);
  EXPECT_NE(html.find("&quot;&#39;&amp;&lt;script"), std::string::npos);
  ExpectSelfContained(html);
}

TEST(HtmlReportTest, SpendShowsEachTenantsTokensAndRateLimits) {
  const std::string html = HtmlReport(CleanResult());
  EXPECT_NE(html.find("<h2>Spend</h2><p>151,200 tokens of a 200,000-token "
                      "budget; sending rate cut 3 times for 429/503"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<tr><td>acme</td><td class=\"n\">40,100</td>"),
            std::string::npos);
}

TEST(CampaignResultSchemaTest, RejectsASpendWithoutItsTenants) {
  SKIP_WITHOUT_JSONSCHEMA();
  json doc = CleanResult();
  doc["spend"].erase("tenants");
  std::string errors;
  EXPECT_EQ(Validate(doc, &errors), 1);
  EXPECT_NE(errors.find("'tenants' is a required property"), std::string::npos)
      << errors;
}

TEST(HtmlReportTest, CoverageBelowTheFloorIsHighlighted) {
  const std::string html = HtmlReport(InconclusiveResult());
  EXPECT_NE(html.find("<td class=\"n low\">13</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"n\">21</td>"), std::string::npos);
}

TEST(HtmlReportTest, IncidentsTableStopsAt200RowsWorstFirst) {
  json r = FindingsResult();
  json many = json::array();
  for (int i = 0; i < 250; ++i) {
    many.push_back(Incident(absl::StrFormat("i-%08x", i), "trace",
                            "trace_unwritten_read", "medium", "initech",
                            "umbrella", 1 + i, "s"));
  }
  many.push_back(r["incidents"][0]);  // critical: listed first
  r["incidents"] = many;
  const std::string html = HtmlReport(r);
  int rows = 0;
  for (size_t at = html.find("<tr><td><b>"); at != std::string::npos;
       at = html.find("<tr><td><b>", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, 200);
  EXPECT_NE(html.find("and 51 more incidents"), std::string::npos);
  EXPECT_LT(html.find("trace_foreign_tenant_read</td>"),
            html.find("trace_unwritten_read</td>"));
}

TEST(HtmlReportTest, TimelineIsAnInlineSvgWithLabelledAxes) {
  const std::string html = HtmlReport(FindingsResult());
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("seconds since start (one bucket = 1 s)"),
            std::string::npos);
  EXPECT_NE(html.find("findings (raw rows)"), std::string::npos);
  EXPECT_EQ(std::count(html.begin(), html.end(), '\0'), 0);
  EXPECT_NE(html.find("<polyline"), std::string::npos);
}

TEST(HtmlReportTest, LongCampaignTimelineIsMergedToAtMost550Points) {
  json r = FindingsResult();
  const std::vector<int> hour(3600, 7);  // an hour of 1 s buckets
  r["timeline"]["probes"] = hour;
  r["timeline"]["errors"] = hour;
  r["timeline"]["findings"] = hour;
  const std::string html = HtmlReport(r);
  // 7 buckets per point, so 515 points of 49 probes each.
  EXPECT_NE(html.find("one bucket = 7 s"), std::string::npos);
  const size_t points = html.find("points=\"");
  ASSERT_NE(points, std::string::npos);
  const std::string line =
      html.substr(points, html.find('"', points + 8) - points);
  EXPECT_EQ(std::count(line.begin(), line.end(), ','), 515);
  EXPECT_LT(html.size(), 200000u);
}

// ---- HTML in a real browser.

std::string Chromium() {
  for (const char* b : {"chromium", "chromium-browser"}) {
    if (Shell(std::string("command -v ") + b + " >/dev/null") == 0) return b;
  }
  return "";
}

// Width and height from a PNG's IHDR chunk; {0, 0} if not a PNG.
std::pair<uint32_t, uint32_t> PngSize(const std::string& png) {
  if (png.size() < 24 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 ||
      png.compare(12, 4, "IHDR") != 0) {
    return {0, 0};
  }
  const auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i)
      v = (v << 8) | static_cast<unsigned char>(png[at + i]);
    return v;
  };
  return {be32(16), be32(20)};
}

TEST(HtmlReportTest, RendersInHeadlessChromium) {
  const std::string chromium = Chromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium not installed (apt-get install chromium "
                    "fonts-dejavu-core); HTML not rendered";
  }
  const std::string html_path = TempPath("findings.html");
  const std::string png_path = TempPath("findings.png");
  WriteFile(html_path, HtmlReport(FindingsResult()));
  std::remove(png_path.c_str());
  // Chromium's profile, under the test's TMPDIR (removed with it).
  const std::string profile = ::testing::TempDir() + "chromium-profile";
  ASSERT_EQ(mkdir(profile.c_str(), 0700), 0);
  const std::string flags =
      std::string(
          " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
          " --disable-background-networking --disable-component-update"
          " --disable-sync --hide-scrollbars --user-data-dir=") +
      profile;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Shell("timeout 60 " + chromium + flags +
                  " --window-size=1200,900 --screenshot=" + png_path +
                  " file://" + html_path + " >/dev/null"),
            0);
  std::string dom;
  ASSERT_EQ(Shell("timeout 60 " + chromium + flags + " --dump-dom file://" +
                      html_path,
                  &dom),
            0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  Shell(std::string("rm -rf ") + profile);
  std::cout << "chromium: screenshot and DOM in " << seconds << " s; "
            << png_path << "\n";
  const auto [width, height] = PngSize(ReadFile(png_path));
  EXPECT_GE(width, 800u);
  EXPECT_GE(height, 600u);
  EXPECT_NE(dom.find("class=\"verdict\">findings</div>"), std::string::npos)
      << dom;
  EXPECT_NE(dom.find("<b>globex</b>"), std::string::npos);  // a writer
  if (const char* dir = std::getenv("KVCANARY_REPORT_SCREENSHOT_DIR")) {
    EXPECT_EQ(Shell(std::string("mkdir -p '") + dir + "' && cp " + png_path +
                    " '" + dir + "/report-findings.png'"),
              0);
  }
}

}  // namespace
}  // namespace kvcanary::auditor
