// kvcanary-auditor: probe | sidecar | verify | findings. docs/auditor.md.
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/campaign.h"
#include "auditor/findings.h"
#include "auditor/incidents.h"
#include "auditor/metrics.h"
#include "auditor/report.h"
#include "auditor/test_break.h"
#include "common/cli.h"
#include "httplib.h"
#include "storage/evidence_store.h"

ABSL_FLAG(std::string, target, "",
          "Base URL of the OpenAI-compatible endpoint to audit (http or "
          "https).");
ABSL_FLAG(
    std::string, tenants, "",
    "Tenants file, {\"tenants\": [{\"id\", \"api_key\"}]}, whose keys the "
    "probes use; at least two.");
ABSL_FLAG(std::vector<std::string>, trace, {},
          "Base URLs of engine nodes whose /v1/trace (kvt1/kvt2) to follow, "
          "comma-separated; without it the trace detector is disabled.");
ABSL_FLAG(std::string, db, "", "Evidence database, a SQLite file.");
ABSL_FLAG(double, duration, 30, "Seconds a campaign probes at most.");
ABSL_FLAG(int, max_probes, 0, "Probes per campaign at most (0: no cap).");
ABSL_FLAG(int, concurrency, 8, "Probes in flight at once.");
ABSL_FLAG(double, rate, 200, "Probes started per second at most.");
ABSL_FLAG(std::string, key_file, "",
          "File holding the secret marker key, at least 16 bytes (default: a "
          "random key per campaign).");
ABSL_FLAG(std::string, model, "",
          "Model name to put in requests (default: the first of the target's "
          "/v1/models).");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "The target's input limit in prompt tokens (default: read where the "
          "target advertises it, else measured).");
ABSL_FLAG(double, timeout, 30, "Seconds each request may take.");
ABSL_FLAG(std::string, floor, "20",
          "Coverage each detector must reach for every tenant before the "
          "verdict can be clean: a count for all, then detector=count "
          "overrides, e.g. 20,trace=5.");
ABSL_FLAG(std::string, require, "",
          "Detectors that must reach their floor for a clean verdict, "
          "comma-separated (default: every detector that applies).");
ABSL_FLAG(int, max_consecutive_failures, 20,
          "Requests in a row without an HTTP answer before the campaign stops "
          "with 'target down' (exit 2).");
ABSL_FLAG(int, max_ladder_tokens, 16384,
          "How many prompt tokens the limit ladder tries at most when the "
          "target advertises no limit.");
ABSL_FLAG(std::string, json, "",
          "Write the campaign-result document (docs/reports.md) to this file.");
ABSL_FLAG(std::string, junit, "",
          "Write JUnit XML (one test case per detector and tenant) to this "
          "file.");
ABSL_FLAG(std::string, html, "",
          "Write a self-contained HTML report to this file.");
ABSL_FLAG(int, max_incident_lines, 50, "Incident lines printed at most.");
ABSL_FLAG(double, interval, 300, "sidecar: seconds between campaign starts.");
ABSL_FLAG(int, metrics_port, 9464,
          "sidecar: port for /metrics and /health (0: any free port, printed "
          "first).");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "sidecar: address to serve /metrics and /health on.");
ABSL_FLAG(std::string, campaign, "",
          "Only this campaign (default: every campaign in the database).");
ABSL_FLAG(std::string, format, "table", "Output format: table or json.");
ABSL_FLAG(bool, rows, false,
          "findings: the raw finding rows instead of incidents.");
ABSL_FLAG(bool, quiet, false, "Print no progress lines on stderr.");
ABSL_FLAG(std::string, test_break, "",
          "Testing only: break these detectors (comma-separated) to show their "
          "positive controls fail.");

namespace kvcanary::auditor {
namespace {

constexpr int kExitOk = 0, kExitFindings = 1, kExitError = 2;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "kvcanary-auditor: %s\n",
               std::string(s.message()).c_str());
  return kExitError;
}

CliSpec Cli() {
  const std::vector<std::string> campaign = {"target",
                                             "tenants",
                                             "trace",
                                             "db",
                                             "duration",
                                             "max_probes",
                                             "concurrency",
                                             "rate",
                                             "key_file",
                                             "model",
                                             "max_prompt_tokens",
                                             "timeout",
                                             "floor",
                                             "require",
                                             "max_consecutive_failures",
                                             "max_ladder_tokens",
                                             "json",
                                             "junit",
                                             "html",
                                             "max_incident_lines",
                                             "quiet"};
  std::vector<std::string> sidecar = campaign;
  sidecar.insert(sidecar.end(), {"interval", "metrics_port", "host"});
  CliSpec spec;
  spec.program = "kvcanary-auditor";
  spec.summary =
      "Acts as several tenants against an OpenAI-compatible endpoint, hunts "
      "cross-tenant contamination, and keeps the evidence in a hash-chained "
      "SQLite file (docs/auditor.md). Exit: 0 clean, 1 findings, 2 error, 3 "
      "inconclusive.";
  spec.subcommands = {
      {"probe",
       "Runs one campaign against --target and prints its verdict, coverage "
       "and incidents.",
       campaign,
       {},
       {"test_break"}},
      {"sidecar",
       "Runs a campaign every --interval seconds and serves /metrics and "
       "/health until SIGINT or SIGTERM.",
       sidecar,
       {},
       {"test_break"}},
      {"verify",
       "Checks the evidence database's hash chain and names the first bad "
       "row.",
       {"db"},
       {}},
      {"findings",
       "Lists the incidents (or, with --rows, the finding rows) recorded in "
       "the evidence database.",
       {"db", "campaign", "format", "rows", "max_incident_lines"},
       {}},
  };
  return spec;
}

absl::StatusOr<CampaignOptions> OptionsFromFlags() {
  CampaignOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  while (!o.target.empty() && o.target.back() == '/') o.target.pop_back();
  if (o.target.empty())
    return absl::InvalidArgumentError("--target is required");
  if (o.target.rfind("http://", 0) != 0 && o.target.rfind("https://", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target '", o.target, "' is not an http(s) URL"));
  }
  if (absl::GetFlag(FLAGS_tenants).empty())
    return absl::InvalidArgumentError("--tenants is required");
  auto tenants = LoadAuditTenants(absl::GetFlag(FLAGS_tenants));
  if (!tenants.ok()) return tenants.status();
  o.tenants = *std::move(tenants);
  o.trace_urls = absl::GetFlag(FLAGS_trace);
  for (std::string& u : o.trace_urls) {
    while (!u.empty() && u.back() == '/') u.pop_back();
  }
  o.db_path = absl::GetFlag(FLAGS_db);
  if (o.db_path.empty()) return absl::InvalidArgumentError("--db is required");
  // Seconds: finite, and at least a millisecond (curl reads a timeout of 0
  // as none at all); a day at most.
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"--duration",
                                       absl::GetFlag(FLAGS_duration)},
        {"--timeout", absl::GetFlag(FLAGS_timeout)},
        {"--interval", absl::GetFlag(FLAGS_interval)},
        {"--rate", absl::GetFlag(FLAGS_rate)}}) {
    if (!std::isfinite(value) || value < 0.001 || value > 86400) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "=", value, ": want a number from 0.001 to 86400"));
    }
  }
  o.duration = absl::Seconds(absl::GetFlag(FLAGS_duration));
  o.request_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout));
  o.max_probes = absl::GetFlag(FLAGS_max_probes);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.max_rate = absl::GetFlag(FLAGS_rate);
  o.model = absl::GetFlag(FLAGS_model);
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o.max_consecutive_failures = absl::GetFlag(FLAGS_max_consecutive_failures);
  o.max_ladder_tokens = absl::GetFlag(FLAGS_max_ladder_tokens);
  if (o.max_probes < 0 || o.max_prompt_tokens < 0 ||
      o.max_consecutive_failures < 1 || o.max_ladder_tokens < 16) {
    return absl::InvalidArgumentError(
        "--max-probes and --max-prompt-tokens must be >= 0, "
        "--max-consecutive-failures >= 1, --max-ladder-tokens >= 16");
  }
  auto floors = ParseFloors(absl::GetFlag(FLAGS_floor));
  if (!floors.ok()) return floors.status();
  o.floors = *std::move(floors);
  if (!o.floors.count("")) o.floors[""] = kDefaultFloor;
  auto required = ParseDetectorList(absl::GetFlag(FLAGS_require));
  if (!required.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--require: ", required.status().message()));
  }
  o.required = *std::move(required);
  auto broken = ParseDetectorList(absl::GetFlag(FLAGS_test_break));
  if (!broken.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--test-break: ", broken.status().message()));
  }
  SetTestBreak(*broken);
  o.progress = !absl::GetFlag(FLAGS_quiet);
  if (!absl::GetFlag(FLAGS_key_file).empty()) {
    std::ifstream in(absl::GetFlag(FLAGS_key_file));
    std::stringstream ss;
    ss << in.rdbuf();
    o.secret_key = ss.str();
    while (!o.secret_key.empty() &&
           (o.secret_key.back() == '\n' || o.secret_key.back() == '\r'))
      o.secret_key.pop_back();
    if (!in || o.secret_key.size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("--key-file ", absl::GetFlag(FLAGS_key_file),
                       ": unreadable or shorter than 16 bytes"));
    }
  }
  return o;
}

// The detector table: state, floor and coverage side by side.
std::string DetectorTable(const std::vector<DetectorCoverage>& detectors) {
  std::string out = absl::StrFormat("%-12s %-13s %-5s %-8s %s\n", "DETECTOR",
                                    "STATE", "FLOOR", "REQUIRED", "COVERAGE");
  for (const DetectorCoverage& d : detectors) {
    absl::StrAppendFormat(
        &out, "%-12s %-13s %-5d %-8s %s\n", d.name, DetectorStateName(d.state),
        d.floor, d.required ? "yes" : "no",
        d.coverage.empty() ? std::string("-")
                           : absl::StrCat(d.CoverageText(), " (", d.unit, ")"));
    if (!d.reason.empty())
      absl::StrAppend(&out, "             ", d.reason, "\n");
    for (const std::string& n : d.notes) {
      absl::StrAppend(&out, "             note: ", n, "\n");
    }
  }
  return out;
}

void PrintSummary(const CampaignResult& r) {
  std::printf(
      "campaign %s: %s (exit %d): %lld probes (%lld usable), %zu finding rows "
      "in %zu incidents, %.1f s\n",
      r.campaign_id.c_str(), VerdictName(r.verdict), r.exit_code(),
      static_cast<long long>(r.probes), static_cast<long long>(r.usable),
      r.findings.size(), r.incidents.size(), absl::ToDoubleSeconds(r.elapsed));
  if (!r.detectors.empty()) {
    std::printf("limit: %d prompt tokens (%s: %s)\n", r.limit.prompt_tokens,
                r.limit.source.c_str(), r.limit.where.c_str());
    std::printf(
        "plants: %s form, %d markers each, %d prompt tokens (%.0f%% of the "
        "limit); %lld of %lld accepted whole\n",
        r.plants.form.empty() ? "none" : r.plants.form.c_str(),
        r.plants.markers_per_plant, r.plants.prompt_tokens, r.plants.fill * 100,
        static_cast<long long>(r.plants.accepted_whole),
        static_cast<long long>(r.plants.sent));
    std::printf("positive controls:");
    for (const auto& [d, passed] : r.positive_controls)
      std::printf(" %s=%s", d.c_str(), passed ? "passed" : "FAILED");
    std::printf("\n%s", DetectorTable(r.detectors).c_str());
  }
  for (const TraceNodeStats& n : r.trace_nodes) {
    std::printf(
        "trace %s: %llu events, %llu dropped, %llu reads checked, %llu "
        "unchecked\n",
        n.url.c_str(), static_cast<unsigned long long>(n.events),
        static_cast<unsigned long long>(n.dropped),
        static_cast<unsigned long long>(n.reads_checked),
        static_cast<unsigned long long>(n.reads_unchecked));
  }
  if (!r.incidents.empty()) {
    std::printf("%s", IncidentTable(r.incidents,
                                    absl::GetFlag(FLAGS_max_incident_lines))
                          .c_str());
  }
  if (!r.reasons.empty() && r.verdict != Verdict::kClean) {
    std::printf("%s because:\n", VerdictName(r.verdict));
    for (const std::string& why : r.reasons) {
      std::printf("  - %s\n", why.c_str());
    }
  }
  if (!r.db_path.empty() && r.verdict != Verdict::kError) {
    std::printf("details: kvcanary-auditor findings --db %s --campaign %s\n",
                r.db_path.c_str(), r.campaign_id.c_str());
  }
}

absl::Status WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

// The --json/--junit/--html reports of `r`. An unwritable report is an
// error: a CI gate reading a stale file would be worse.
absl::Status WriteReports(const CampaignResult& r) {
  const nlohmann::json doc = r.ToJson();
  if (const std::string p = absl::GetFlag(FLAGS_json); !p.empty()) {
    if (absl::Status s = WriteFile(p, doc.dump(2) + "\n"); !s.ok()) return s;
  }
  if (const std::string p = absl::GetFlag(FLAGS_junit); !p.empty()) {
    if (absl::Status s = WriteFile(p, JunitXml(doc)); !s.ok()) return s;
  }
  if (const std::string p = absl::GetFlag(FLAGS_html); !p.empty()) {
    if (absl::Status s = WriteFile(p, HtmlReport(doc)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

int Probe() {
  auto o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  const CampaignResult r = RunCampaign(*o, &metrics);
  PrintSummary(r);
  if (absl::Status s = WriteReports(r); !s.ok()) return Fail(s);
  if (r.verdict == Verdict::kError) {
    std::fprintf(stderr, "kvcanary-auditor: %s\n",
                 r.reasons.empty() ? "error" : r.reasons[0].c_str());
  }
  return r.exit_code();
}

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Sidecar() {
  auto o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  httplib::Server server;
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Serialize(), "text/plain; version=0.0.4");
  });
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\",\"role\":\"auditor\"}",
                    "application/json");
  });
  int port = absl::GetFlag(FLAGS_metrics_port);
  const std::string host = absl::GetFlag(FLAGS_host);
  if (port == 0) {
    port = server.bind_to_any_port(host);
  } else if (!server.bind_to_port(host, port)) {
    port = -1;
  }
  if (port < 0) {
    return Fail(absl::UnavailableError(absl::StrCat(
        "cannot listen on ", host, ":", absl::GetFlag(FLAGS_metrics_port))));
  }
  std::thread http([&] { server.listen_after_bind(); });
  std::printf("metrics http://%s:%d/metrics\n", host.c_str(), port);
  std::fflush(stdout);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  while (!g_stop.load()) {
    const absl::Time next =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_interval));
    const CampaignResult r = RunCampaign(*o, &metrics);
    PrintSummary(r);
    if (absl::Status s = WriteReports(r); !s.ok()) {
      std::fprintf(stderr, "kvcanary-auditor: %s\n",
                   std::string(s.message()).c_str());
    }
    std::fflush(stdout);
    while (!g_stop.load() && absl::Now() < next) {
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  server.stop();
  http.join();
  return kExitOk;  // a sidecar asked to stop stopped cleanly
}

int Verify() {
  const std::string db = absl::GetFlag(FLAGS_db);
  if (db.empty()) return Fail(absl::InvalidArgumentError("--db is required"));
  auto report = storage::EvidenceStore::Verify(db);
  if (!report.ok()) return Fail(report.status());
  if (report->ok) {
    std::printf("%s: hash chain intact, %lld rows verified\n", db.c_str(),
                static_cast<long long>(report->rows_checked));
    return kExitOk;
  }
  std::printf("%s: TAMPERED: first bad row %lld: %s\n", db.c_str(),
              static_cast<long long>(report->first_bad_seq),
              report->problem.c_str());
  return kExitFindings;
}

// Raw finding rows, one line each, never cut mid-field.
void PrintRows(const std::vector<storage::EvidenceRow>& rows) {
  std::printf("%-6s %-26s %-26s %-9s %-12s %-12s %-12s %-6s %s\n", "SEQ",
              "CAMPAIGN", "KIND", "SEVERITY", "DETECTOR", "WRITER", "READER",
              "PROBE", "ENGINE_REQUEST/PAGE");
  for (const storage::EvidenceRow& r : rows) {
    const nlohmann::json& b = r.record.body;
    const nlohmann::json d = b.value("detail", nlohmann::json::object());
    std::string where = absl::StrCat(b.value("engine_request", uint64_t{0}));
    if (d.contains("page")) absl::StrAppend(&where, "/", d["page"].dump());
    auto dash = [](const std::string& s) { return s.empty() ? "-" : s; };
    std::printf(
        "%-6lld %-26s %-26s %-9s %-12s %-12s %-12s %-6s %s\n",
        static_cast<long long>(r.seq), r.record.campaign.c_str(),
        b.value("kind", "").c_str(), b.value("severity", "").c_str(),
        b.value("detector", "").c_str(), dash(b.value("writer", "")).c_str(),
        dash(b.value("reader", "")).c_str(),
        b.contains("probe") ? b["probe"].dump().c_str() : "-", where.c_str());
  }
  std::printf("%zu finding rows\n", rows.size());
}

// The rows of `kind` (of --campaign, if given).
absl::StatusOr<std::vector<storage::EvidenceRow>> Rows(
    const storage::EvidenceStore& store, const std::string& kind) {
  storage::EvidenceFilter filter;
  filter.campaign = absl::GetFlag(FLAGS_campaign);
  filter.kind = kind;
  return store.Query(filter);
}

int Findings() {
  const std::string db = absl::GetFlag(FLAGS_db);
  if (db.empty()) return Fail(absl::InvalidArgumentError("--db is required"));
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "table" && format != "json") {
    return Fail(absl::InvalidArgumentError("--format: table or json"));
  }
  std::ifstream exists(db);
  if (!exists)
    return Fail(absl::NotFoundError(absl::StrCat(db, ": no such file")));
  auto store = storage::EvidenceStore::Open(db);
  if (!store.ok()) return Fail(store.status());
  auto findings = Rows(**store, "finding");
  if (!findings.ok()) return Fail(findings.status());
  if (absl::GetFlag(FLAGS_rows)) {
    if (format == "table") {
      PrintRows(*findings);
      return kExitOk;
    }
    nlohmann::json out = nlohmann::json::array();
    for (const storage::EvidenceRow& r : *findings) {
      nlohmann::json j = r.record.body;
      j["seq"] = r.seq;
      j["campaign"] = r.record.campaign;
      out.push_back(std::move(j));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  auto starts = Rows(**store, "campaign_start");
  auto ends = Rows(**store, "campaign_end");
  auto incident_rows = Rows(**store, "incident");
  if (!starts.ok() || !ends.ok() || !incident_rows.ok()) {
    return Fail(!starts.ok() ? starts.status()
                : !ends.ok() ? ends.status()
                             : incident_rows.status());
  }
  std::map<std::string, std::vector<Incident>> incidents;
  for (const storage::EvidenceRow& r : *incident_rows) {
    incidents[r.record.campaign].push_back(Incident::FromJson(r.record.body));
  }
  // A campaign that ended before grouping (killed, or an error) still has
  // its finding rows: grouped here.
  std::map<std::string, std::vector<Finding>> ungrouped;
  for (const storage::EvidenceRow& r : *findings) {
    if (!incidents.count(r.record.campaign)) {
      ungrouped[r.record.campaign].push_back(Finding::FromJson(r.record.body));
    }
  }
  for (auto& [campaign, rows] : ungrouped) {
    JoinWriters(&rows);
    incidents[campaign] = GroupIncidents(campaign, rows);
  }
  std::map<std::string, nlohmann::json> end_of;
  for (const storage::EvidenceRow& e : *ends) {
    end_of[e.record.campaign] = e.record.body;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const storage::EvidenceRow& start : *starts) {
    const std::string& c = start.record.campaign;
    const auto& list = incidents[c];
    const auto end = end_of.find(c);
    const std::string verdict =
        end == end_of.end()
            ? "no end recorded (interrupted)"
            : end->second.value("verdict", end->second.value("result", "?"));
    if (format == "json") {
      nlohmann::json is = nlohmann::json::array();
      for (const Incident& i : list) is.push_back(i.ToJson());
      out.push_back({{"campaign", c}, {"verdict", verdict}, {"incidents", is}});
      continue;
    }
    std::printf("campaign %s: %s, %zu incidents\n", c.c_str(), verdict.c_str(),
                list.size());
    if (!list.empty()) {
      std::printf(
          "%s",
          IncidentTable(list, absl::GetFlag(FLAGS_max_incident_lines)).c_str());
    }
  }
  if (format == "json") std::printf("%s\n", out.dump(2).c_str());
  return kExitOk;
}

}  // namespace
}  // namespace kvcanary::auditor

int main(int argc, char** argv) {
  using namespace kvcanary::auditor;
  const kvcanary::CliSpec spec = Cli();
  if (argc < 2) {
    std::fputs(kvcanary::CliHelp(spec, "").c_str(), stderr);
    return kExitError;
  }
  absl::StatusOr<kvcanary::CliParse> cli = kvcanary::ParseCli(spec, argc, argv);
  if (!cli.ok()) return Fail(cli.status());
  if (cli->help) {
    std::fputs(kvcanary::CliHelp(spec, cli->subcommand).c_str(), stdout);
    return kExitOk;
  }
  const std::string& command = cli->subcommand;
  if (command == "probe") return Probe();
  if (command == "sidecar") return Sidecar();
  if (command == "verify") return Verify();
  return Findings();  // ParseCli admits only the four subcommands
}
