// `kvcanary-auditor accept`: the long-context acceptance sweep — the test
// the 2026 incident's launch lacked. Prompt lengths from short to the
// target's input limit (advertised or measured) — every page boundary ±1 for
// a page size, the powers of two, the limit itself — and past it. At each
// length: a nonce at the start, middle and end must come back when asked
// for (only at the (length, position) pairs where it came back k of k
// times alone); a fixed greedy question after filler of that length must
// give the same answer on repeated runs, and under --load the answer
// recorded alone; usage.prompt_tokens must grow by exactly the added
// filler's measured count; past the limit the request must be refused.
// Each (length, check) is a Check, so JUnit names the length that failed.
#ifndef KVCANARY_AUDITOR_AUDITS_ACCEPT_ACCEPT_H_
#define KVCANARY_AUDITOR_AUDITS_ACCEPT_ACCEPT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "auditor/reports/metrics.h"
#include "auditor/result/result.h"
#include "auditor/target/target.h"

namespace kvcanary::auditor {

struct AcceptOptions {
  TargetOptions target;  // the first tenant sweeps; the others are --load
  std::string db_path;
  int page_tokens = 16;       // page size whose boundaries are swept ±1
  int max_prompt_tokens = 0;  // the input limit; 0: advertised or measured
  int max_ladder_tokens = 16384;
  int load = 0;     // other tenants sending traffic in the under-load pass
  int repeats = 3;  // k: echo k of k alone; golden runs per length (>= 2)
  int concurrency = 8;
  // A plan of more lengths than this is not swept: inconclusive, naming
  // the cap (a 32k limit at page 16 is thousands of lengths).
  int max_lengths = 400;
  uint64_t seed = 0;  // the load's prompt lengths; 0: random
  bool progress = true;
};

// kInvalidArgument naming the bad option: --repeats below 2, --page-tokens,
// --concurrency or --max-lengths below 1, --load not below the tenants.
absl::Status ValidateAcceptOptions(const AcceptOptions& options);

// Runs the sweep; invalid options are an error result (exit 2).
CampaignResult RunAccept(const AcceptOptions& options, AuditorMetrics* metrics);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_ACCEPT_ACCEPT_H_
