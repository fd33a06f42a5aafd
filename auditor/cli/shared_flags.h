// The flags more than one kvcanary-auditor subcommand reads, declared once
// (shared_flags.cc), and what turns them into a command's options: the
// target and its tenants, the evidence database, the reports, and
// `Conclude`, which prints a result and gives the exit code. A flag only one
// subcommand reads is declared in that subcommand's file.
#ifndef KVCANARY_AUDITOR_CLI_SHARED_FLAGS_H_
#define KVCANARY_AUDITOR_CLI_SHARED_FLAGS_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/result.h"
#include "auditor/target/target.h"

// The target: probe, sidecar, accept, facts, cache-audit.
ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, tenants);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, api);
ABSL_DECLARE_FLAG(double, timeout);
ABSL_DECLARE_FLAG(int, max_consecutive_failures);
ABSL_DECLARE_FLAG(int, max_prompt_tokens);
ABSL_DECLARE_FLAG(int, max_ladder_tokens);
ABSL_DECLARE_FLAG(int, concurrency);
ABSL_DECLARE_FLAG(uint64_t, seed);
// What the auditor reads besides the API, and the marker key.
ABSL_DECLARE_FLAG(std::vector<std::string>, trace);
ABSL_DECLARE_FLAG(std::string, trace_token_file);
ABSL_DECLARE_FLAG(std::string, kv_events);
ABSL_DECLARE_FLAG(std::string, key_file);
// The evidence database and the reports.
ABSL_DECLARE_FLAG(std::string, db);
ABSL_DECLARE_FLAG(std::string, json);
ABSL_DECLARE_FLAG(std::string, junit);
ABSL_DECLARE_FLAG(std::string, html);
ABSL_DECLARE_FLAG(std::string, metrics_file);
ABSL_DECLARE_FLAG(int, max_incident_lines);
ABSL_DECLARE_FLAG(bool, quiet);
ABSL_DECLARE_FLAG(std::string, format);
// The signed log: keys, origin, checkpoint directories, output.
ABSL_DECLARE_FLAG(std::string, key);
ABSL_DECLARE_FLAG(std::string, origin);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(std::string, checkpoint_mirror);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(std::string, pubkey);

namespace kvcanary::auditor::cli {

inline constexpr int kExitOk = 0, kExitFindings = 1, kExitError = 2;

// Prints "kvcanary-auditor: <message>" on stderr; returns kExitError.
int Fail(const absl::Status& s);

// `flags` followed by the flags of a command that concludes with a result:
// --db, the report files, --max-incident-lines and --quiet.
std::vector<std::string> WithReportFlags(std::vector<std::string> flags);

// Seconds from a flag named `name` ("--timeout"): finite, at least a
// millisecond (curl reads a timeout of 0 as none at all), a day at most.
absl::Status CheckSeconds(const char* name, double value);

// --target, --tenants (required or not), --model, --api, --timeout,
// --max-consecutive-failures.
absl::StatusOr<TargetOptions> TargetFromFlags(bool tenants_required);

// The secret marker key from --key-file; "" without one (a random key).
absl::StatusOr<std::string> SecretKeyFromFlags();

// --trace's URLs, normalised.
absl::StatusOr<std::vector<std::string>> TraceUrlsFromFlags();

// --kv-events, with --trace-token-file as its password; empty options
// without --kv-events.
absl::StatusOr<kv_events::SubscriberOptions> KvEventsFromFlags();

// --db; kInvalidArgument if it is empty.
absl::StatusOr<std::string> DbFromFlags();

// The checkpoint directories: --checkpoint-dir and --checkpoint-mirror,
// those given.
std::vector<std::string> CheckpointDirs();

// --target/--tenants/... into o->target, --db into o->db_path, and
// whether to print progress (--quiet) into o->progress.
template <typename Options>
absl::Status CommandFromFlags(bool tenants_required, Options* o) {
  absl::StatusOr<TargetOptions> target = TargetFromFlags(tenants_required);
  if (!target.ok()) return target.status();
  o->target = *std::move(target);
  absl::StatusOr<std::string> db = DbFromFlags();
  if (!db.ok()) return db.status();
  o->db_path = *db;
  o->progress = !absl::GetFlag(FLAGS_quiet);
  return absl::OkStatus();
}

// The --json/--junit/--html reports of `r`. An unwritable report is an
// error: a CI gate reading a stale file would be worse.
absl::Status WriteReports(const CampaignResult& r);

// Prints `r` (at most --max-incident-lines of incidents), writes its
// reports and --metrics-file, prints r.error beside any verdict, and
// returns the exit code: r's, or kExitError if a file cannot be written.
int Conclude(const CampaignResult& r, const AuditorMetrics& metrics);

}  // namespace kvcanary::auditor::cli

#endif  // KVCANARY_AUDITOR_CLI_SHARED_FLAGS_H_
