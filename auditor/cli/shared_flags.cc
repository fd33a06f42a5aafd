#include "auditor/cli/shared_flags.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/reports/report.h"
#include "auditor/reports/result_text.h"
#include "auditor/target/target_url.h"
#include "auditor/target/tenants.h"
#include "auditor/trace/follower.h"
#include "common/file.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, target, "",
          "Base URL of the OpenAI-compatible endpoint to audit: "
          "http(s)://host:port, with or without /v1 (as OpenAI SDKs take it).");
ABSL_FLAG(
    std::string, tenants, "",
    "Tenants file, {\"tenants\": [{\"id\", \"api_key\"}]}, whose keys the "
    "probes use: at least two (facts: optional; without it only what needs "
    "no key is read).");
ABSL_FLAG(std::string, model, "",
          "Model name to put in requests (default: the first of the target's "
          "/v1/models).");
ABSL_FLAG(std::string, api, "auto",
          "The OpenAI API to send requests through: completions "
          "(/v1/completions), chat (/v1/chat/completions), or auto: "
          "completions where the target answers a text completion, else "
          "chat.");
ABSL_FLAG(double, timeout, 30, "Seconds each request may take.");
ABSL_FLAG(int, max_consecutive_failures, 20,
          "Requests in a row without an HTTP answer before the campaign stops "
          "with 'target down' (exit 2).");
ABSL_FLAG(int, max_prompt_tokens, 0,
          "The target's input limit in prompt tokens (default: read where the "
          "target advertises it, else measured).");
ABSL_FLAG(int, max_ladder_tokens, 16384,
          "How many prompt tokens the limit ladder tries at most when the "
          "target advertises no limit.");
ABSL_FLAG(int, concurrency, 8, "Probes in flight at once.");
ABSL_FLAG(uint64_t, seed, 0,
          "accept: seed of the load's prompt lengths; cache-audit: of the "
          "random prefixes and arm order (0: random).");
ABSL_FLAG(std::vector<std::string>, trace, {},
          "Base URLs of engine nodes, comma-separated. probe, sidecar: whose "
          "/v1/trace (kvt1/kvt2) to follow; without it the trace detector is "
          "disabled. facts: node endpoints to read as well (out of scope "
          "otherwise).");
ABSL_FLAG(std::string, trace_token_file, "",
          "File holding the nodes' /v1/trace admin token (kvcanary-engine "
          "up prints its path; also our engine's --kv-events password); facts "
          "reads the nodes without it.");
ABSL_FLAG(std::string, kv_events, "",
          "probe, sidecar, cache-audit: the engine's KV event stream, tcp://H:P"
          "[,replay=tcp://H:P][,topic=T][,pairs=N] (docs/kv-events.md).");
ABSL_FLAG(std::string, key_file, "",
          "File holding the secret marker key, at least 16 bytes (default: a "
          "random key per campaign).");
ABSL_FLAG(std::string, db, "", "Evidence database, a SQLite file.");
ABSL_FLAG(std::string, json, "",
          "Write the campaign-result document (docs/reports.md) to this file.");
ABSL_FLAG(
    std::string, junit, "",
    "Write JUnit XML (a test case per detector and tenant) to this file.");
ABSL_FLAG(std::string, html, "", "Write a self-contained HTML report here.");
ABSL_FLAG(std::string, metrics_file, "",
          "Write the command's Prometheus metrics to this file when it ends "
          "(for a textfile collector).");
ABSL_FLAG(int, max_incident_lines, 50,
          "Incident and failed check lines printed at most (rest: reports).");
ABSL_FLAG(bool, quiet, false, "Print no progress lines on stderr.");
ABSL_FLAG(std::string, format, "",
          "findings: output format, table (default) or json. forensics: the "
          "log's shape, a format in --mapping (default: its only one), else "
          "kvcanary (the router's --access-log).");
ABSL_FLAG(std::string, key, "",
          "Ed25519 private key (PKCS#8 PEM, from keygen or `openssl genpkey "
          "-algorithm ed25519`) that signs checkpoints.");
ABSL_FLAG(std::string, origin, "",
          "Checkpoint origin and key name (default: kvcanary/<hostname>).");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "checkpoint, sidecar: directory for signed checkpoints (sidecar: "
          "one after every campaign; needs --key).");
ABSL_FLAG(std::string, checkpoint_mirror, "",
          "checkpoint, sidecar: a second checkpoint directory (a mounted "
          "bucket, another host's share).");
ABSL_FLAG(std::string, out, "",
          "keygen: the private key file to write (PKCS#8 PEM); the public key "
          "goes to the same name plus .pub. export: the bundle directory "
          "(new or empty).");
ABSL_FLAG(std::string, pubkey, "",
          "verify, verify-bundle: the Ed25519 public key (PEM) checkpoints "
          "and bundles are signed with.");

namespace kvcanary::auditor::cli {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "kvcanary-auditor: %s\n",
               std::string(s.message()).c_str());
  return kExitError;
}

std::vector<std::string> WithReportFlags(std::vector<std::string> flags) {
  flags.insert(flags.end(), {"db", "json", "junit", "html", "metrics_file",
                             "max_incident_lines", "quiet"});
  return flags;
}

absl::Status CheckSeconds(const char* name, double value) {
  if (!std::isfinite(value) || value < 0.001 || value > 86400) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, ": want a number from 0.001 to 86400"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TargetOptions> TargetFromFlags(bool tenants_required) {
  TargetOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  if (o.target.empty())
    return absl::InvalidArgumentError("--target is required");
  if (auto url = ParseTargetUrl(o.target); !url.ok()) return url.status();
  if (absl::GetFlag(FLAGS_tenants).empty()) {
    if (tenants_required) {
      return absl::InvalidArgumentError("--tenants is required");
    }
  } else {
    auto tenants = LoadAuditTenants(absl::GetFlag(FLAGS_tenants));
    if (!tenants.ok()) return tenants.status();
    o.tenants = *std::move(tenants);
  }
  if (absl::Status s = CheckSeconds("--timeout", absl::GetFlag(FLAGS_timeout));
      !s.ok()) {
    return s;
  }
  o.request_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout));
  o.model = absl::GetFlag(FLAGS_model);
  ASSIGN_OR_RETURN(o.api, ParseApi(absl::GetFlag(FLAGS_api)));
  o.max_consecutive_failures = absl::GetFlag(FLAGS_max_consecutive_failures);
  if (o.max_consecutive_failures < 1) {
    return absl::InvalidArgumentError(
        "--max-consecutive-failures must be >= 1");
  }
  return o;
}

absl::StatusOr<std::string> SecretKeyFromFlags() {
  const std::string path = absl::GetFlag(FLAGS_key_file);
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> text = ReadFile(path);
  std::string key = text.ok() ? *text : "";
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) {
    key.pop_back();
  }
  if (key.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--key-file ", path, ": unreadable or shorter than 16 bytes"));
  }
  return key;
}

absl::StatusOr<std::vector<std::string>> TraceUrlsFromFlags() {
  return NormalizeTraceUrls(absl::GetFlag(FLAGS_trace));
}

absl::StatusOr<kv_events::SubscriberOptions> KvEventsFromFlags() {
  return kv_events::KvEventsFromFlags(absl::GetFlag(FLAGS_kv_events),
                                      absl::GetFlag(FLAGS_trace_token_file));
}

absl::StatusOr<std::string> DbFromFlags() {
  const std::string db = absl::GetFlag(FLAGS_db);
  if (db.empty()) return absl::InvalidArgumentError("--db is required");
  return db;
}

std::vector<std::string> CheckpointDirs() {
  std::vector<std::string> dirs;
  for (const std::string& d : {absl::GetFlag(FLAGS_checkpoint_dir),
                               absl::GetFlag(FLAGS_checkpoint_mirror)}) {
    if (!d.empty()) dirs.push_back(d);
  }
  return dirs;
}

namespace {

absl::Status WriteFile(const std::string& path, const std::string& content) {
  return WriteFileAtomically(path, content, 0644);  // whole or none
}

}  // namespace

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

int Conclude(const CampaignResult& r, const AuditorMetrics& metrics) {
  std::fputs(ResultText(r, absl::GetFlag(FLAGS_max_incident_lines)).c_str(),
             stdout);
  absl::Status written = WriteReports(r);
  if (const std::string p = absl::GetFlag(FLAGS_metrics_file);
      written.ok() && !p.empty()) {
    written = WriteFile(p, metrics.Serialize());
  }
  if (!r.error.empty()) {  // beside any verdict, findings included
    std::fprintf(stderr, "kvcanary-auditor: %s\n", r.error.c_str());
  }
  if (!written.ok()) {
    // A report that could not be written is an error (a CI gate reading a
    // stale file would be worse), but it does not hide a finding the
    // command proved: findings outrank it, as they outrank any error.
    const int failed = Fail(written);
    return r.verdict == Verdict::kFindings ? r.exit_code() : failed;
  }
  return r.exit_code();
}

}  // namespace kvcanary::auditor::cli
