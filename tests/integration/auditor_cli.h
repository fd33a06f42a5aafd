// Test helpers for the auditor as a process: kvcanary-auditor run to
// completion (exit code and stdout), temp paths, a sidecar against a
// cluster, and a real Prometheus (Debian's) scraping it with the alert
// rules loaded.
#ifndef KVCANARY_TESTS_INTEGRATION_AUDITOR_CLI_H_
#define KVCANARY_TESTS_INTEGRATION_AUDITOR_CLI_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/cluster.h"
#include "tests/temp_path.h"

namespace kvcanary::testing {

inline std::string AuditorBinary() {
  return std::string(KVCANARY_BIN_DIR) + "/kvcanary-auditor";
}

inline std::string TempPath(const std::string& name) {
  return testing_paths::UniqueTempPath("kvcanary-auditor", name);
}

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout, and stderr after it
};

// Runs the auditor to completion, stdout and stderr captured.
inline CliRun Auditor(const std::vector<std::string>& args) {
  std::string cmd = AuditorBinary();
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `probe` against the cluster's router, following both nodes' traces.
inline std::vector<std::string> ProbeArgs(const Cluster& c,
                                          const std::string& db,
                                          int max_probes) {
  return {"probe",
          "--target=" + c.router(),
          "--tenants=" + WriteTenantsFile(),
          "--trace=" + c.prefill() + "," + c.decode(),
          "--trace-token-file=" + c.trace_token_file(),
          "--db=" + db,
          "--max-probes=" + std::to_string(max_probes),
          "--duration=120",
          "--concurrency=8",
          "--quiet"};
}

// A sidecar running campaigns every second against `cluster` with
// `extra` flags, /metrics on any free port (its URL is the first stdout
// line).
inline std::unique_ptr<Process> StartSidecar(
    const Cluster& cluster, const std::string& db_name,
    const std::vector<std::string>& extra = {"--max-probes=30"}) {
  std::vector<std::string> args = {"sidecar",
                                   "--target=" + cluster.router(),
                                   "--tenants=" + WriteTenantsFile(),
                                   "--db=" + TempPath(db_name),
                                   "--interval=1",
                                   "--metrics-port=0",
                                   "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(args, AuditorBinary());
}

// host:port of a sidecar from its first stdout line; "" if it did not
// start.
inline std::string SidecarTarget(Process& sidecar) {
  const std::string line = sidecar.ReadLine();
  if (line.rfind("metrics http://", 0) != 0) return "";
  return line.substr(15, line.find("/metrics") - 15);
}

inline bool HavePrometheus() {
  return std::system("command -v prometheus >/dev/null 2>&1") == 0;
}

// A real Prometheus scraping `targets` (host:port) every second and
// evaluating dashboards/alerts.yml every second.
class Prometheus {
 public:
  explicit Prometheus(const std::vector<std::string>& targets) {
    dir_ = TempPath("prometheus");
    mkdir(dir_.c_str(), 0755);
    std::string list;
    for (const std::string& t : targets) {
      list += (list.empty() ? "'" : ", '") + t + "'";
    }
    std::ofstream(dir_ + "/prometheus.yml")
        << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        << "rule_files: ['" << KVCANARY_SOURCE_DIR
        << "/dashboards/alerts.yml']\n"
        << "scrape_configs:\n"
        << "  - job_name: kvcanary-auditor\n"
        << "    static_configs: [{targets: [" << list << "]}]\n";
    const int port = FreePort();
    api_ = "http://127.0.0.1:" + std::to_string(port);
    process_ = std::make_unique<Process>(
        std::vector<std::string>{
            "-c", "exec prometheus --config.file=" + dir_ + "/prometheus.yml" +
                      " --storage.tsdb.path=" + dir_ + "/data" +
                      " --web.listen-address=127.0.0.1:" +
                      std::to_string(port) + " 2>" + dir_ + "/prometheus.log"},
        "/bin/sh");
  }
  ~Prometheus() {
    process_->Signal(SIGTERM);
    process_->Wait();
  }
  const std::string& api() const { return api_; }
  // The value of an instant query's first sample, or -1.
  double Query(const std::string& query_escaped) const {
    const auto j = nlohmann::json::parse(
        Get(api_, "/api/v1/query?query=" + query_escaped).body, nullptr, false);
    if (!j.is_object() || j.value("status", "") != "success" ||
        j["data"]["result"].empty()) {
      return -1;
    }
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  }
  // The state of alert `name` ("firing", "pending"), or "" if inactive.
  std::string AlertState(const std::string& name) const {
    const auto j =
        nlohmann::json::parse(Get(api_, "/api/v1/alerts").body, nullptr, false);
    if (!j.is_object() || !j.contains("data")) return "";
    for (const auto& a : j["data"]["alerts"]) {
      if (a["labels"].value("alertname", "") == name) {
        return a.value("state", "");
      }
    }
    return "";
  }
  nlohmann::json Rules() const {
    return nlohmann::json::parse(Get(api_, "/api/v1/rules").body, nullptr,
                                 false);
  }

 private:
  std::string dir_, api_;
  std::unique_ptr<Process> process_;
};

}  // namespace kvcanary::testing

#endif  // KVCANARY_TESTS_INTEGRATION_AUDITOR_CLI_H_
