// kvcanary-auditor: probe | sidecar | verify | findings. docs/auditor.md.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "auditor/campaign.h"
#include "auditor/findings.h"
#include "auditor/metrics.h"
#include "common/cli_args.h"
#include "httplib.h"
#include "storage/evidence_store.h"

ABSL_FLAG(std::string, target, "", "probe/sidecar: base URL of the endpoint");
ABSL_FLAG(
    std::string, tenants, "",
    "probe/sidecar: tenants file ({\"tenants\": [{\"id\", \"api_key\"}]})");
ABSL_FLAG(std::vector<std::string>, trace, {},
          "probe/sidecar: engine node base URLs whose /v1/trace to follow");
ABSL_FLAG(std::string, db, "", "evidence database (SQLite)");
ABSL_FLAG(double, duration, 30, "probe/sidecar: seconds per campaign");
ABSL_FLAG(int, max_probes, 0, "probe/sidecar: probes per campaign (0: no cap)");
ABSL_FLAG(int, concurrency, 8, "probe/sidecar: probes in flight");
ABSL_FLAG(double, rate, 200, "probe/sidecar: probes per second at most");
ABSL_FLAG(std::string, key_file, "",
          "probe/sidecar: file holding the secret marker key (default: a "
          "random key per campaign)");
ABSL_FLAG(std::string, model, "", "the request's model (default: /v1/models)");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "the target's advertised input limit (default: from /v1/models)");
ABSL_FLAG(double, timeout, 30, "seconds per request");
ABSL_FLAG(double, interval, 300, "sidecar: seconds between campaign starts");
ABSL_FLAG(int, metrics_port, 9464, "sidecar: /metrics port (0: any free)");
ABSL_FLAG(std::string, host, "127.0.0.1", "sidecar: address for /metrics");
ABSL_FLAG(std::string, campaign, "", "findings: only this campaign");
ABSL_FLAG(std::string, format, "table", "findings: table or json");
ABSL_FLAG(bool, quiet, false, "no progress lines on stderr");

namespace kvcanary::auditor {
namespace {

constexpr int kExitClean = 0, kExitFindings = 1, kExitError = 2;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "kvcanary-auditor: %s\n",
               std::string(s.message()).c_str());
  return kExitError;
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
  if (absl::GetFlag(FLAGS_duration) <= 0 || absl::GetFlag(FLAGS_timeout) <= 0)
    return absl::InvalidArgumentError("--duration and --timeout must be > 0");
  o.duration = absl::Seconds(absl::GetFlag(FLAGS_duration));
  o.request_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout));
  o.max_probes = absl::GetFlag(FLAGS_max_probes);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.max_rate = absl::GetFlag(FLAGS_rate);
  o.model = absl::GetFlag(FLAGS_model);
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
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

void PrintSummary(const CampaignResult& r) {
  std::printf(
      "campaign %s: %lld probes (%lld without a usable answer), %zu "
      "findings, %.1f s\n",
      r.campaign_id.c_str(), static_cast<long long>(r.probes),
      static_cast<long long>(r.probe_errors), r.findings.size(),
      absl::ToDoubleSeconds(r.elapsed));
  std::printf("positive controls:");
  for (const auto& [d, fired] : r.positive_controls)
    std::printf(" %s=%s", d.c_str(), fired ? "passed" : "FAILED");
  std::printf("\ndetectors:\n");
  for (const auto& [d, s] : r.detectors)
    std::printf("  %-12s %s\n", d.c_str(), s.c_str());
  if (r.trace_events > 0 || r.trace_dropped > 0) {
    std::printf("trace events: %llu consumed, %llu dropped\n",
                static_cast<unsigned long long>(r.trace_events),
                static_cast<unsigned long long>(r.trace_dropped));
  }
  if (!r.findings.empty()) std::printf("%s", FindingsTable(r.findings).c_str());
}

int Probe() {
  auto o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  auto r = RunCampaign(*o, &metrics);
  if (!r.ok()) return Fail(r.status());
  PrintSummary(*r);
  return r->findings.empty() ? kExitClean : kExitFindings;
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
  int worst = kExitClean;
  while (!g_stop.load()) {
    const absl::Time next =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_interval));
    auto r = RunCampaign(*o, &metrics);
    if (!r.ok()) {
      std::fprintf(stderr, "kvcanary-auditor: campaign failed: %s\n",
                   std::string(r.status().message()).c_str());
      worst = kExitError;
    } else {
      PrintSummary(*r);
      if (!r->findings.empty() && worst == kExitClean) worst = kExitFindings;
    }
    std::fflush(stdout);
    while (!g_stop.load() && absl::Now() < next) {
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  server.stop();
  http.join();
  (void)worst;
  return kExitClean;  // a sidecar asked to stop stopped cleanly
}

int Verify() {
  const std::string db = absl::GetFlag(FLAGS_db);
  if (db.empty()) return Fail(absl::InvalidArgumentError("--db is required"));
  auto report = storage::EvidenceStore::Verify(db);
  if (!report.ok()) return Fail(report.status());
  if (report->ok) {
    std::printf("%s: hash chain intact, %lld rows verified\n", db.c_str(),
                static_cast<long long>(report->rows_checked));
    return kExitClean;
  }
  std::printf("%s: TAMPERED: first bad row %lld: %s\n", db.c_str(),
              static_cast<long long>(report->first_bad_seq),
              report->problem.c_str());
  return kExitFindings;
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
  storage::EvidenceFilter filter;
  filter.kind = "finding";
  filter.campaign = absl::GetFlag(FLAGS_campaign);
  auto rows = (*store)->Query(filter);
  if (!rows.ok()) return Fail(rows.status());
  if (format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const storage::EvidenceRow& r : *rows) {
      nlohmann::json j = r.record.body;
      j["seq"] = r.seq;
      j["campaign"] = r.record.campaign;
      j["ts_us"] = r.record.ts_us;
      out.push_back(std::move(j));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitClean;
  }
  std::printf("%-6s %-26s %-30s %-9s %-12s %s\n", "SEQ", "CAMPAIGN", "KIND",
              "SEVERITY", "DETECTOR", "DETAIL");
  for (const storage::EvidenceRow& r : *rows) {
    const nlohmann::json& b = r.record.body;
    std::string detail = b.value("detail", nlohmann::json::object()).dump();
    if (detail.size() > 120) detail = detail.substr(0, 117) + "...";
    std::printf("%-6lld %-26s %-30s %-9s %-12s %s\n",
                static_cast<long long>(r.seq), r.record.campaign.c_str(),
                b.value("kind", "").c_str(), b.value("severity", "").c_str(),
                b.value("detector", "").c_str(), detail.c_str());
  }
  // And a summary, worst first.
  std::map<std::pair<std::string, std::string>, int> by_kind;
  for (const storage::EvidenceRow& r : *rows) {
    const nlohmann::json& b = r.record.body;
    ++by_kind[{b.value("severity", ""), b.value("kind", "")}];
  }
  std::printf("%zu findings", rows->size());
  if (!by_kind.empty()) std::printf(", by kind:");
  std::printf("\n");
  for (const char* sev : {"critical", "high", "medium", "low"}) {
    for (const auto& [key, n] : by_kind) {
      if (key.first == sev) {
        std::printf("  %-9s %-30s %d\n", sev, key.second.c_str(), n);
      }
    }
  }
  return kExitClean;
}

}  // namespace
}  // namespace kvcanary::auditor

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "kvcanary-auditor probe|sidecar|verify|findings [flags]; see "
      "docs/auditor.md");
  // Accept --max-probes as well as --max_probes.
  std::vector<std::string> normalized =
      kvcanary::UnderscoreFlagNames(argc, argv);
  std::vector<char*> argv2 = kvcanary::ArgvOf(normalized);
  std::vector<char*> args =
      absl::ParseCommandLine(static_cast<int>(argv2.size()), argv2.data());
  if (args.size() != 2) {
    std::fprintf(stderr,
                 "usage: kvcanary-auditor probe|sidecar|verify|findings "
                 "[flags] (--help for flags)\n");
    return 2;
  }
  const std::string command = args[1];
  using namespace kvcanary::auditor;
  if (command == "probe") return Probe();
  if (command == "sidecar") return Sidecar();
  if (command == "verify") return Verify();
  if (command == "findings") return Findings();
  std::fprintf(stderr, "kvcanary-auditor: unknown command '%s'\n",
               command.c_str());
  return 2;
}
