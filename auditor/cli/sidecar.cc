// kvcanary-auditor sidecar: a campaign every --interval seconds, /metrics
// and /health served between them, a signed checkpoint after each, until
// SIGINT or SIGTERM (docs/auditor.md).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "auditor/campaign/campaign.h"
#include "auditor/cli/campaign_flags.h"
#include "auditor/cli/commands.h"
#include "auditor/cli/shared_flags.h"
#include "auditor/evidence/tlog_commands.h"
#include "auditor/reports/metrics.h"
#include "auditor/reports/result_text.h"
#include "common/http_server.h"

ABSL_FLAG(double, interval, 300, "sidecar: seconds between campaign starts.");
ABSL_FLAG(int, metrics_port, 9464,
          "sidecar: port for /metrics and /health (0: any free port, printed "
          "first).");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "sidecar: address to serve /metrics and /health on.");

namespace kvcanary::auditor::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

// --interval, and the checkpoint flags' combinations.
absl::Status CheckSidecarFlags() {
  if (absl::Status s =
          CheckSeconds("--interval", absl::GetFlag(FLAGS_interval));
      !s.ok()) {
    return s;
  }
  if (!CheckpointDirs().empty() && absl::GetFlag(FLAGS_key).empty()) {
    return absl::InvalidArgumentError(
        "--checkpoint-dir and --checkpoint-mirror need --key");
  }
  if (!absl::GetFlag(FLAGS_checkpoint_mirror).empty() &&
      absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    return absl::InvalidArgumentError(
        "--checkpoint-mirror needs --checkpoint-dir");
  }
  return absl::OkStatus();
}

// Serves `metrics` on /metrics and /health at --host:--metrics-port and
// prints the URL; the port it bound.
absl::StatusOr<int> ServeMetrics(const AuditorMetrics& metrics,
                                 http::Server* server) {
  server->Get(
      "/metrics", [&metrics](const http::Request&, http::Response& res) {
        res.set_content(metrics.Serialize(), "text/plain; version=0.0.4");
      });
  server->Get("/health", [](const http::Request&, http::Response& res) {
    res.set_content("{\"status\":\"ok\",\"role\":\"auditor\"}",
                    "application/json");
  });
  const std::string host = absl::GetFlag(FLAGS_host);
  auto bound = server->Bind(host, absl::GetFlag(FLAGS_metrics_port));
  if (!bound.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", host, ":", absl::GetFlag(FLAGS_metrics_port)));
  }
  server->Start();
  std::printf("metrics http://%s:%d/metrics\n", host.c_str(), *bound);
  std::fflush(stdout);
  return *bound;
}

// One campaign: its result printed, its reports written, and a signed
// checkpoint into `checkpoint_dirs` (if any). A failure to write is
// reported and the sidecar goes on (the next checkpoint covers these rows
// too).
void RunOnce(const CampaignOptions& o,
             const std::vector<std::string>& checkpoint_dirs,
             AuditorMetrics* metrics) {
  const CampaignResult r = RunCampaign(o, metrics);
  std::fputs(ResultText(r, absl::GetFlag(FLAGS_max_incident_lines)).c_str(),
             stdout);
  if (absl::Status s = WriteReports(r); !s.ok()) {
    std::fprintf(stderr, "kvcanary-auditor: %s\n",
                 std::string(s.message()).c_str());
  }
  if (!checkpoint_dirs.empty() &&
      Checkpoint({o.db_path, absl::GetFlag(FLAGS_key),
                  absl::GetFlag(FLAGS_origin), checkpoint_dirs}) != 0) {
    std::fprintf(stderr, "kvcanary-auditor: no checkpoint written\n");
  }
  std::fflush(stdout);
}

int RunSidecar(const CliParse&) {
  absl::StatusOr<CampaignOptions> o = CampaignOptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  if (absl::Status s = CheckSidecarFlags(); !s.ok()) return Fail(s);
  const std::vector<std::string> checkpoint_dirs = CheckpointDirs();
  AuditorMetrics metrics;
  http::Server server;
  if (absl::StatusOr<int> port = ServeMetrics(metrics, &server); !port.ok()) {
    return Fail(port.status());
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  while (!g_stop.load()) {
    const absl::Time next =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_interval));
    RunOnce(*o, checkpoint_dirs, &metrics);
    while (!g_stop.load() && absl::Now() < next) {
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  server.Stop();
  return kExitOk;  // a sidecar asked to stop stopped cleanly
}

std::vector<std::string> SidecarFlags() {
  std::vector<std::string> flags = CampaignFlagNames();
  flags.insert(flags.end(), {"interval", "metrics_port", "host", "key",
                             "origin", "checkpoint_dir", "checkpoint_mirror"});
  return flags;
}

const CommandRegistration kSidecar(
    AuditorCommands(),
    {20,
     {"sidecar",
      "Runs a campaign every --interval seconds and serves /metrics and "
      "/health until SIGINT or SIGTERM.",
      SidecarFlags(),
      {},
      {"test_break"}},
     RunSidecar});

}  // namespace
}  // namespace kvcanary::auditor::cli
