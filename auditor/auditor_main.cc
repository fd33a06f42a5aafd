// kvcanary-auditor: probe | sidecar | accept | facts | cache-audit |
// forensics | verify | findings. docs/auditor.md.
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/audits/accept/accept.h"
#include "auditor/audits/cache_audit/cache_audit.h"
#include "auditor/audits/facts/facts.h"
#include "auditor/audits/forensics/forensics.h"
#include "auditor/campaign/campaign.h"
#include "auditor/detectors/registry.h"
#include "auditor/evidence/bundle_verify.h"
#include "auditor/evidence/commands.h"
#include "auditor/evidence/export.h"
#include "auditor/evidence/tlog_commands.h"
#include "auditor/reports/metrics.h"
#include "auditor/reports/report.h"
#include "auditor/reports/result_text.h"
#include "auditor/result/finding.h"
#include "auditor/result/incidents.h"
#include "auditor/trace/follower.h"
#include "common/cli.h"
#include "common/file.h"
#include "common/http_server.h"
#include "common/status_macros.h"
#include "storage/ed25519_key.h"
#include "storage/evidence_store.h"

ABSL_FLAG(std::string, target, "",
          "Base URL of the OpenAI-compatible endpoint to audit: "
          "http(s)://host:port, with or without /v1 (as OpenAI SDKs take it).");
ABSL_FLAG(
    std::string, tenants, "",
    "Tenants file, {\"tenants\": [{\"id\", \"api_key\"}]}, whose keys the "
    "probes use: at least two (facts: optional; without it only what needs "
    "no key is read).");
ABSL_FLAG(std::string, trace_token_file, "",
          "File holding the nodes' /v1/trace admin token (kvcanary-engine "
          "up prints its path; also our engine's --kv-events password); facts "
          "reads the nodes without it.");
ABSL_FLAG(std::string, tls_cert, "",
          "probe, sidecar: for nodes that require mutual TLS "
          "(kvcanary-engine --tls), the client certificate (PEM) to present "
          "when following their traces; with --tls-key and --tls-ca.");
ABSL_FLAG(std::string, tls_key, "", "The key of --tls-cert (PEM).");
ABSL_FLAG(std::string, tls_ca, "", "The nodes' CA (PEM), the only trusted.");
ABSL_FLAG(std::vector<std::string>, trace, {},
          "Base URLs of engine nodes, comma-separated. probe, sidecar: whose "
          "/v1/trace (kvt1/kvt2) to follow; without it the trace detector is "
          "disabled. facts: node endpoints to read as well (out of scope "
          "otherwise).");
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
ABSL_FLAG(
    std::string, junit, "",
    "Write JUnit XML (a test case per detector and tenant) to this file.");
ABSL_FLAG(std::string, html, "", "Write a self-contained HTML report here.");
ABSL_FLAG(int, max_incident_lines, 50,
          "Incident and failed check lines printed at most (rest: reports).");
ABSL_FLAG(double, interval, 300, "sidecar: seconds between campaign starts.");
ABSL_FLAG(int, metrics_port, 9464,
          "sidecar: port for /metrics and /health (0: any free port, printed "
          "first).");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "sidecar: address to serve /metrics and /health on.");
ABSL_FLAG(std::string, campaign, "",
          "Only this campaign (default: every campaign in the database).");
ABSL_FLAG(std::string, format, "",
          "findings: output format, table (default) or json. forensics: the "
          "log's shape, a format in --mapping (default: its only one), else "
          "kvcanary (the router's --access-log).");
ABSL_FLAG(bool, rows, false,
          "findings: the raw finding rows instead of incidents.");
ABSL_FLAG(std::string, metrics_file, "",
          "Write the command's Prometheus metrics to this file when it ends "
          "(for a textfile collector).");
ABSL_FLAG(int, page_tokens, 16,
          "accept: the page size whose boundaries (each ±1) the sweep "
          "covers.");
ABSL_FLAG(int, load, 0,
          "accept: tenants (after the first) sending traffic during the "
          "under-load pass (0: no such pass).");
ABSL_FLAG(int, repeats, 3,
          "accept: runs alone per length: echo must come back this many times "
          "of this many; golden must give one answer.");
ABSL_FLAG(int, max_lengths, 400,
          "accept: prompt lengths the sweep may plan at most; a plan over it "
          "sends nothing and is inconclusive (raise it, or --page-tokens).");
ABSL_FLAG(double, alpha, 1e-6,
          "cache-audit: significance of the two-sample Kolmogorov-Smirnov "
          "test.");
ABSL_FLAG(int, max_samples, 400,
          "cache-audit: first-token times per arm at most (at least 12 at the "
          "default alpha, at most 2000).");
ABSL_FLAG(uint64_t, seed, 0,
          "accept: seed of the load's prompt lengths; cache-audit: of the "
          "random prefixes and arm order (0: random).");
ABSL_FLAG(int, prefix_tokens, 0,
          "cache-audit: tokens of the primed prefix (0: sized from the "
          "limit).");
ABSL_FLAG(std::string, kv_events, "",
          "probe, sidecar, cache-audit: the engine's KV event stream, tcp://H:P"
          "[,replay=tcp://H:P][,topic=T][,pairs=N] (docs/kv-events.md).");
ABSL_FLAG(std::string, log, "", "forensics: the request log to read.");
ABSL_FLAG(std::string, mapping, "",
          "forensics: a field mapping file for another engine's log "
          "(docs/forensics.md).");
ABSL_FLAG(int, input_limit, 0,
          "forensics: the serving input limit in prompt tokens.");
ABSL_FLAG(double, ttft_floor_us_per_token, 0,
          "forensics: the first-token floor per prompt token in microseconds "
          "(0: from the latest calibration in --db, else not checked).");
ABSL_FLAG(std::string, calibration_target, "",
          "forensics: the URL of the server the log is from (as probe's "
          "--target); the first-token floor comes from the latest calibration "
          "against it in --db.");
ABSL_FLAG(double, window, 3600,
          "forensics: seconds per time window of the counts.");
ABSL_FLAG(bool, quiet, false, "Print no progress lines on stderr.");
ABSL_FLAG(std::string, out, "",
          "keygen: the private key file to write (PKCS#8 PEM); the public key "
          "goes to the same name plus .pub. export: the bundle directory "
          "(new or empty).");
ABSL_FLAG(bool, force, false, "keygen: replace an existing key pair.");
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
ABSL_FLAG(std::string, checkpoint, "",
          "verify: a checkpoint file, or a directory of them, to verify the "
          "log against (with --pubkey).");
ABSL_FLAG(std::string, pubkey, "",
          "verify, verify-bundle: the Ed25519 public key (PEM) checkpoints "
          "and bundles are signed with.");
ABSL_FLAG(std::string, since, "",
          "export: campaigns started at or after this time (RFC 3339, e.g. "
          "2026-11-01T00:00:00Z).");
ABSL_FLAG(std::string, until, "",
          "export: campaigns started at or before this time (RFC 3339; "
          "default: now).");
ABSL_FLAG(std::string, controls, "",
          "export: the control map (docs/controls.md; default: the one built "
          "in, docs/controls.json).");
ABSL_FLAG(int64_t, row, 0, "prove: the row (seq) to prove included.");
ABSL_FLAG(uint64_t, tree_size, 0,
          "prove: the tree size the row is proved in (0: every row).");
ABSL_FLAG(uint64_t, from_size, 0,
          "prove: the older tree size of a consistency proof.");
ABSL_FLAG(uint64_t, to_size, 0,
          "prove: the newer tree size of a consistency proof (0: every "
          "row).");
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

// accept, facts, cache-audit, forensics: one-off audits with reports.
std::vector<Subcommand> AuditSubcommands() {
  auto with_reports = [](std::vector<std::string> flags) {
    flags.insert(flags.end(), {"db", "json", "junit", "html", "metrics_file",
                               "max_incident_lines", "quiet"});
    return flags;
  };
  return {
      {"accept",
       "The long-context acceptance sweep: echo, golden, token counts and "
       "refusals at every page boundary up to the input limit and past it.",
       with_reports({"target", "tenants", "model", "timeout",
                     "max_prompt_tokens", "max_ladder_tokens",
                     "max_consecutive_failures", "page_tokens", "load",
                     "repeats", "concurrency", "max_lengths", "seed"}),
       {}},
      {"facts",
       "What the endpoint reveals about itself, field by field, and whether "
       "any endpoint shows one tenant's data to another or to no key.",
       with_reports(
           {"target", "tenants", "trace", "model", "timeout", "key_file"}),
       {}},
      {"cache-audit",
       "Whether the prompt cache lets one tenant's prompt speed up "
       "another's: first-token timing (KS test) and reported cached tokens.",
       with_reports({"target", "tenants", "model", "timeout", "alpha",
                     "max_samples", "prefix_tokens", "seed", "kv_events",
                     "trace_token_file", "max_consecutive_failures"}),
       {}},
      {"forensics",
       "Reads request logs and counts requests with a silent-contamination "
       "signature, per tenant and time window, as a floor.",
       with_reports({"log", "format", "mapping", "input_limit",
                     "calibration_target", "ttft_floor_us_per_token",
                     "window"}),
       {}},
  };
}

// verify, keygen, checkpoint, export, verify-bundle, prove, findings: the
// evidence log's subcommands.
std::vector<Subcommand> EvidenceSubcommands() {
  return {
      {"verify",
       "Checks the evidence database's hash chain, and with --checkpoint its "
       "signed Merkle log: names the first bad or diverging row and the rows "
       "missing.",
       {"db", "checkpoint", "pubkey"},
       {}},
      {"keygen",
       "Writes an Ed25519 key pair for signing checkpoints.",
       {"out", "force"},
       {}},
      {"checkpoint",
       "Signs a C2SP checkpoint of the evidence log's RFC 6962 Merkle tree "
       "into --checkpoint-dir (and --checkpoint-mirror).",
       {"db", "key", "origin", "checkpoint_dir", "checkpoint_mirror"},
       {}},
      {"export",
       "Writes a signed, self-contained bundle of the campaigns started in a "
       "window: their verdicts, coverage, incidents and rows with inclusion "
       "proofs, OSCAL assessment results and questionnaire answers.",
       {"db", "since", "until", "key", "origin", "out", "controls"},
       {}},
      {"verify-bundle",
       "Checks an export bundle offline, with no database: signatures, "
       "proofs, every cited row and every file.",
       {"pubkey"},
       {"dir"}},
      {"prove",
       "Prints an inclusion proof (--row) or a consistency proof "
       "(--from-size, --to-size) of the evidence log.",
       {"db", "row", "tree_size", "from_size", "to_size"},
       {}},
      {"findings",
       "Lists the incidents (or, with --rows, the finding rows) recorded in "
       "the evidence database.",
       {"db", "campaign", "format", "rows", "max_incident_lines"},
       {}},
  };
}

// The subcommands: the campaigns here, then the audits and the evidence's.
CliSpec Cli() {
  CliSpec spec;
  spec.program = "kvcanary-auditor";
  spec.summary =
      "Acts as several tenants against an OpenAI-compatible endpoint, hunts "
      "cross-tenant contamination, and keeps the evidence in a hash-chained "
      "SQLite file (docs/auditor.md). Exit: 0 clean, 1 findings, 2 error, 3 "
      "inconclusive.";
  // probe and sidecar: the target and how hard to probe it, then the
  // probes, the verdict and the reports.
  std::vector<std::string> probe = {
      "target",   "tenants",    "trace",       "trace_token_file",
      "tls_cert", "tls_key",    "tls_ca",      "db",
      "duration", "max_probes", "concurrency", "rate"};
  probe.insert(
      probe.end(),
      {"key_file", "model", "max_prompt_tokens", "timeout", "floor", "require",
       "max_consecutive_failures", "max_ladder_tokens", "json", "junit", "html",
       "max_incident_lines", "quiet", "kv_events"});
  std::vector<std::string> sidecar = probe;
  sidecar.insert(sidecar.end(),
                 {"interval", "metrics_port", "host", "key", "origin",
                  "checkpoint_dir", "checkpoint_mirror"});
  probe.push_back("metrics_file");
  spec.subcommands = {
      {"probe",
       "Runs one campaign against --target and prints its verdict, coverage "
       "and incidents.",
       probe,
       {},
       {"test_break"}},
      {"sidecar",
       "Runs a campaign every --interval seconds and serves /metrics and "
       "/health until SIGINT or SIGTERM.",
       sidecar,
       {},
       {"test_break"}},
  };
  for (const auto& group : {AuditSubcommands(), EvidenceSubcommands()}) {
    spec.subcommands.insert(spec.subcommands.end(), group.begin(), group.end());
  }
  return spec;
}

// Seconds from a flag: finite, at least a millisecond (curl reads a
// timeout of 0 as none at all), a day at most.
absl::Status CheckSeconds(const char* name, double value) {
  if (!std::isfinite(value) || value < 0.001 || value > 86400) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, ": want a number from 0.001 to 86400"));
  }
  return absl::OkStatus();
}

// --target, --tenants (required or not), --model, --timeout,
// --max-consecutive-failures.
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
  o.max_consecutive_failures = absl::GetFlag(FLAGS_max_consecutive_failures);
  if (o.max_consecutive_failures < 1) {
    return absl::InvalidArgumentError(
        "--max-consecutive-failures must be >= 1");
  }
  return o;
}

// The secret marker key from --key-file; "" without one (a random key).
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

// The checkpoint directories: --checkpoint-dir and --checkpoint-mirror.
std::vector<std::string> CheckpointDirs() {
  std::vector<std::string> dirs;
  for (const std::string& d : {absl::GetFlag(FLAGS_checkpoint_dir),
                               absl::GetFlag(FLAGS_checkpoint_mirror)}) {
    if (!d.empty()) dirs.push_back(d);
  }
  return dirs;
}

absl::StatusOr<std::string> DbFromFlags() {
  const std::string db = absl::GetFlag(FLAGS_db);
  if (db.empty()) return absl::InvalidArgumentError("--db is required");
  return db;
}

absl::StatusOr<CampaignOptions> OptionsFromFlags() {
  CampaignOptions o;
  auto target = TargetFromFlags(/*tenants_required=*/true);
  if (!target.ok()) return target.status();
  o.target = target->target;
  o.tenants = target->tenants;
  o.model = target->model;
  o.request_timeout = target->request_timeout;
  o.max_consecutive_failures = target->max_consecutive_failures;
  ASSIGN_OR_RETURN(o.trace_urls, TraceUrlsFromFlags());
  ASSIGN_OR_RETURN(o.trace_token,
                   ReadTraceToken(absl::GetFlag(FLAGS_trace_token_file)));
  o.trace_tls = {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                 absl::GetFlag(FLAGS_tls_ca)};
  RETURN_IF_ERROR(tls::CheckFiles(o.trace_tls));
  ASSIGN_OR_RETURN(o.db_path, DbFromFlags());
  for (const auto& [name, value] :
       {std::pair<const char*, double>{"--duration",
                                       absl::GetFlag(FLAGS_duration)},
        {"--interval", absl::GetFlag(FLAGS_interval)},
        {"--rate", absl::GetFlag(FLAGS_rate)}}) {
    if (absl::Status s = CheckSeconds(name, value); !s.ok()) return s;
  }
  o.duration = absl::Seconds(absl::GetFlag(FLAGS_duration));
  o.max_probes = absl::GetFlag(FLAGS_max_probes);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.max_rate = absl::GetFlag(FLAGS_rate);
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o.max_ladder_tokens = absl::GetFlag(FLAGS_max_ladder_tokens);
  if (o.max_probes < 0 || o.max_prompt_tokens < 0 || o.max_ladder_tokens < 16) {
    return absl::InvalidArgumentError(
        "--max-probes and --max-prompt-tokens must be >= 0, "
        "--max-ladder-tokens >= 16");
  }
  ASSIGN_OR_RETURN(o.floors, ParseFloors(absl::GetFlag(FLAGS_floor)));
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
  o.broken = *std::move(broken);
  o.progress = !absl::GetFlag(FLAGS_quiet);
  ASSIGN_OR_RETURN(o.secret_key, SecretKeyFromFlags());
  ASSIGN_OR_RETURN(o.kv_events, kv_events::KvEventsFromFlags(
                                    absl::GetFlag(FLAGS_kv_events),
                                    absl::GetFlag(FLAGS_trace_token_file)));
  return o;
}

absl::Status WriteFile(const std::string& path, const std::string& content) {
  return WriteFileAtomically(path, content, 0644);  // whole or none
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

// Prints `r`, writes its reports and --metrics-file, and returns its exit
// code.
int Conclude(const CampaignResult& r, const AuditorMetrics& metrics) {
  std::fputs(ResultText(r, absl::GetFlag(FLAGS_max_incident_lines)).c_str(),
             stdout);
  if (absl::Status s = WriteReports(r); !s.ok()) return Fail(s);
  if (const std::string p = absl::GetFlag(FLAGS_metrics_file); !p.empty()) {
    if (absl::Status s = WriteFile(p, metrics.Serialize()); !s.ok()) {
      return Fail(s);
    }
  }
  if (!r.error.empty()) {  // beside any verdict, findings included
    std::fprintf(stderr, "kvcanary-auditor: %s\n", r.error.c_str());
  }
  return r.exit_code();
}

int ProbeCmd() {
  auto o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  AuditorMetrics metrics;
  return Conclude(RunCampaign(*o, &metrics), metrics);
}

// --target/--tenants/... and --db of a command, and whether to print
// progress.
template <typename Options>
absl::Status CommandFromFlags(bool tenants_required, Options* o) {
  auto target = TargetFromFlags(tenants_required);
  if (!target.ok()) return target.status();
  o->target = *std::move(target);
  auto db = DbFromFlags();
  if (!db.ok()) return db.status();
  o->db_path = *db;
  o->progress = !absl::GetFlag(FLAGS_quiet);
  return absl::OkStatus();
}

int Accept() {
  AcceptOptions o;
  if (absl::Status s = CommandFromFlags(/*tenants_required=*/true, &o);
      !s.ok()) {
    return Fail(s);
  }
  o.page_tokens = absl::GetFlag(FLAGS_page_tokens);
  o.max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  o.max_ladder_tokens = absl::GetFlag(FLAGS_max_ladder_tokens);
  o.load = absl::GetFlag(FLAGS_load);
  o.repeats = absl::GetFlag(FLAGS_repeats);
  o.concurrency = absl::GetFlag(FLAGS_concurrency);
  o.max_lengths = absl::GetFlag(FLAGS_max_lengths);
  o.seed = absl::GetFlag(FLAGS_seed);
  if (o.max_prompt_tokens < 0 || o.max_ladder_tokens < 16) {
    return Fail(absl::InvalidArgumentError(
        "--max-prompt-tokens must be >= 0, --max-ladder-tokens >= 16"));
  }
  if (o.load >= static_cast<int>(o.target.tenants.size())) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--load=", o.load, " needs ", o.load + 1,
        " tenants in --tenants (the first sweeps, the others load)")));
  }
  if (absl::Status s = ValidateAcceptOptions(o); !s.ok()) return Fail(s);
  AuditorMetrics metrics;
  return Conclude(RunAccept(o, &metrics), metrics);
}

int Facts() {
  FactsOptions o;
  if (absl::Status s = CommandFromFlags(/*tenants_required=*/false, &o);
      !s.ok()) {
    return Fail(s);
  }
  auto node_urls = TraceUrlsFromFlags();
  if (!node_urls.ok()) return Fail(node_urls.status());
  o.node_urls = *std::move(node_urls);
  auto key = SecretKeyFromFlags();
  if (!key.ok()) return Fail(key.status());
  o.secret_key = *std::move(key);
  AuditorMetrics metrics;
  return Conclude(RunFacts(o, &metrics), metrics);
}

int CacheAudit() {
  CacheAuditOptions o;
  if (absl::Status s = CommandFromFlags(/*tenants_required=*/true, &o);
      !s.ok()) {
    return Fail(s);
  }
  o.alpha = absl::GetFlag(FLAGS_alpha);
  o.max_samples = absl::GetFlag(FLAGS_max_samples);
  o.prefix_tokens = absl::GetFlag(FLAGS_prefix_tokens);
  o.seed = absl::GetFlag(FLAGS_seed);
  auto kv = kv_events::KvEventsFromFlags(absl::GetFlag(FLAGS_kv_events),
                                         absl::GetFlag(FLAGS_trace_token_file));
  if (!kv.ok()) return Fail(kv.status());
  o.kv_events = *std::move(kv);
  if (!(o.alpha > 0 && o.alpha < 1) || o.max_samples < 1 ||
      o.prefix_tokens < 0) {
    return Fail(absl::InvalidArgumentError(
        "--alpha must be in (0, 1), --max-samples >= 1, --prefix-tokens >= "
        "0"));
  }
  AuditorMetrics metrics;
  return Conclude(RunCacheAudit(o, &metrics), metrics);
}

int Forensics() {
  ForensicsOptions o;
  o.log_path = absl::GetFlag(FLAGS_log);
  if (o.log_path.empty()) {
    return Fail(absl::InvalidArgumentError("--log is required"));
  }
  o.format = absl::GetFlag(FLAGS_format);
  if (o.format.empty()) o.format = "kvcanary";
  o.mapping_path = absl::GetFlag(FLAGS_mapping);
  o.input_limit = absl::GetFlag(FLAGS_input_limit);
  o.ttft_floor_us_per_token = absl::GetFlag(FLAGS_ttft_floor_us_per_token);
  o.calibration_target = absl::GetFlag(FLAGS_calibration_target);
  auto db = DbFromFlags();
  if (!db.ok()) return Fail(db.status());
  o.db_path = *db;
  if (absl::Status s = CheckSeconds("--window", absl::GetFlag(FLAGS_window));
      !s.ok()) {
    return Fail(s);
  }
  o.window = absl::Seconds(absl::GetFlag(FLAGS_window));
  o.progress = !absl::GetFlag(FLAGS_quiet);
  if (o.input_limit < 1 || !std::isfinite(o.ttft_floor_us_per_token) ||
      o.ttft_floor_us_per_token < 0) {
    return Fail(absl::InvalidArgumentError(
        "--input-limit must be >= 1 and --ttft-floor-us-per-token >= 0"));
  }
  AuditorMetrics metrics;
  return Conclude(RunForensics(o, &metrics), metrics);
}

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

int Sidecar() {
  auto o = OptionsFromFlags();
  if (!o.ok()) return Fail(o.status());
  const std::vector<std::string> checkpoint_dirs = CheckpointDirs();
  if (!checkpoint_dirs.empty() && absl::GetFlag(FLAGS_key).empty()) {
    return Fail(absl::InvalidArgumentError(
        "--checkpoint-dir and --checkpoint-mirror need --key"));
  }
  if (!absl::GetFlag(FLAGS_checkpoint_mirror).empty() &&
      absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    return Fail(absl::InvalidArgumentError(
        "--checkpoint-mirror needs --checkpoint-dir"));
  }
  AuditorMetrics metrics;
  http::Server server;
  server.Get("/metrics", [&](const http::Request&, http::Response& res) {
    res.set_content(metrics.Serialize(), "text/plain; version=0.0.4");
  });
  server.Get("/health", [](const http::Request&, http::Response& res) {
    res.set_content("{\"status\":\"ok\",\"role\":\"auditor\"}",
                    "application/json");
  });
  const std::string host = absl::GetFlag(FLAGS_host);
  auto bound = server.Bind(host, absl::GetFlag(FLAGS_metrics_port));
  if (!bound.ok()) {
    return Fail(absl::UnavailableError(absl::StrCat(
        "cannot listen on ", host, ":", absl::GetFlag(FLAGS_metrics_port))));
  }
  const int port = *bound;
  server.Start();
  std::printf("metrics http://%s:%d/metrics\n", host.c_str(), port);
  std::fflush(stdout);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  while (!g_stop.load()) {
    const absl::Time next =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_interval));
    const CampaignResult r = RunCampaign(*o, &metrics);
    std::fputs(ResultText(r, absl::GetFlag(FLAGS_max_incident_lines)).c_str(),
               stdout);
    if (absl::Status s = WriteReports(r); !s.ok()) {
      std::fprintf(stderr, "kvcanary-auditor: %s\n",
                   std::string(s.message()).c_str());
    }
    // A signed checkpoint after every campaign; a failure is reported and
    // the sidecar goes on (the next one covers these rows too).
    if (!checkpoint_dirs.empty() &&
        Checkpoint({o->db_path, absl::GetFlag(FLAGS_key),
                    absl::GetFlag(FLAGS_origin), checkpoint_dirs}) != 0) {
      std::fprintf(stderr, "kvcanary-auditor: no checkpoint written\n");
    }
    std::fflush(stdout);
    while (!g_stop.load() && absl::Now() < next) {
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  server.Stop();
  return kExitOk;  // a sidecar asked to stop stopped cleanly
}

int Findings() {
  FindingsOptions o;
  o.db = absl::GetFlag(FLAGS_db);
  o.campaign = absl::GetFlag(FLAGS_campaign);
  o.format = absl::GetFlag(FLAGS_format);
  if (o.format.empty()) o.format = "table";
  o.rows = absl::GetFlag(FLAGS_rows);
  o.max_lines = absl::GetFlag(FLAGS_max_incident_lines);
  return FindingsCommand(o);
}

int CheckpointCmd() {
  if (absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    return Fail(absl::InvalidArgumentError("--checkpoint-dir is required"));
  }
  return Checkpoint({absl::GetFlag(FLAGS_db), absl::GetFlag(FLAGS_key),
                     absl::GetFlag(FLAGS_origin), CheckpointDirs()});
}

int Prove() {
  ProveOptions o;
  o.db = absl::GetFlag(FLAGS_db);
  o.row = absl::GetFlag(FLAGS_row);
  o.tree_size = absl::GetFlag(FLAGS_tree_size);
  o.from_size = absl::GetFlag(FLAGS_from_size);
  o.to_size = absl::GetFlag(FLAGS_to_size);
  if (o.row < 0 || (o.row == 0) == (o.from_size == 0)) {
    return Fail(absl::InvalidArgumentError(
        "prove: --row N (inclusion) or --from-size A [--to-size B] "
        "(consistency), not both"));
  }
  return kvcanary::auditor::Prove(o);
}

int Export() {
  ExportOptions o;
  o.db = absl::GetFlag(FLAGS_db);
  o.key = absl::GetFlag(FLAGS_key);
  o.origin = absl::GetFlag(FLAGS_origin);
  o.out_dir = absl::GetFlag(FLAGS_out);
  if (o.db.empty() || o.key.empty() || o.out_dir.empty() ||
      absl::GetFlag(FLAGS_since).empty()) {
    return Fail(absl::InvalidArgumentError(
        "export needs --db, --since, --key and --out"));
  }
  auto since = ParseRfc3339Us(absl::GetFlag(FLAGS_since));
  if (!since.ok()) return Fail(since.status());
  o.since_us = *since;
  if (const std::string until = absl::GetFlag(FLAGS_until); !until.empty()) {
    auto u = ParseRfc3339Us(until);
    if (!u.ok()) return Fail(u.status());
    o.until_us = *u;
  }
  return ExportCommand(o, absl::GetFlag(FLAGS_controls));
}

int VerifyBundleCmd(const std::vector<std::string>& args) {
  if (args.size() != 1 || absl::GetFlag(FLAGS_pubkey).empty()) {
    return Fail(absl::InvalidArgumentError(
        "usage: kvcanary-auditor verify-bundle DIR --pubkey P"));
  }
  return VerifyBundle(args[0], absl::GetFlag(FLAGS_pubkey));
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
  if (command == "probe") return ProbeCmd();
  if (command == "accept") return Accept();
  if (command == "facts") return Facts();
  if (command == "cache-audit") return CacheAudit();
  if (command == "forensics") return Forensics();
  if (command == "sidecar") return Sidecar();
  if (command == "verify") {
    return VerifyCommand({absl::GetFlag(FLAGS_db),
                          absl::GetFlag(FLAGS_checkpoint),
                          absl::GetFlag(FLAGS_pubkey)});
  }
  if (command == "keygen") {
    return Keygen({absl::GetFlag(FLAGS_out), absl::GetFlag(FLAGS_force)});
  }
  if (command == "checkpoint") return CheckpointCmd();
  if (command == "prove") return Prove();
  if (command == "export") return Export();
  if (command == "verify-bundle") return VerifyBundleCmd(cli->positional);
  return Findings();  // ParseCli admits only the subcommands listed
}
