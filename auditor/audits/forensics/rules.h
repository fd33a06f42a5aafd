// The silent-contamination signatures `forensics` looks for, judged one
// logged request at a time, and the tallies that state them per tenant and
// time window as floors ("at least N": the log shows only what it
// recorded). docs/forensics.md states each rule.
//
//   over_limit_served          status 2xx and prompt_tokens > the input
//                              limit: a prompt the server should have
//                              refused was answered.
//   ttft_below_floor           status 2xx and ttft_ms below
//                              floor_us_per_token × (prompt_tokens −
//                              cached_tokens), judged where that floor is
//                              ≥ 0.3 ms (an implied prefill ≥ 1 ms, as the
//                              latency detector).
//   served_after_node_failure  status 2xx while a node's outcome is
//                              neither "ok" nor absent.
#ifndef KVCANARY_AUDITOR_AUDITS_FORENSICS_RULES_H_
#define KVCANARY_AUDITOR_AUDITS_FORENSICS_RULES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "auditor/audits/forensics/log.h"
#include "auditor/result/finding.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

enum Rule { kOverLimitRule = 0, kTtftRule = 1, kNodeFailureRule = 2 };
inline constexpr int kNumRules = 3;
// The finding kind of each rule: over_limit_served, ttft_below_floor,
// served_after_node_failure.
const char* RuleKind(int rule);

// The smallest first-token floor judged, ms (see above).
inline constexpr double kMinJudgedFloorMs = 0.3;

// Where the first-token floor came from.
struct TtftFloor {
  double us_per_token = 0;  // 0: no floor
  bool from_flag = false;   // --ttft-floor-us-per-token
  std::string source;       // where it came from, or why there is none
  nlohmann::json evidence = nlohmann::json::object();  // the calibration
};

struct RuleState {
  bool enabled = false;   // it runs on this log
  bool required = false;  // a clean verdict needs it
  std::string why_not;    // when not enabled
  std::string method;     // the rule in words, with its numbers
};

// Which rules run on logs of `format`, and which a clean verdict needs:
// the over-limit rule always (it needs status and prompt_tokens); the
// first-token rule when a floor is given by flag, or comes from a
// calibration and the log records ttft_ms; the node rule when the log
// records node outcomes.
struct RuleSet {
  int input_limit = 0;
  TtftFloor floor;
  std::array<RuleState, kNumRules> rules;
};
RuleSet MakeRuleSet(const LogFormat& format, int input_limit,
                    const TtftFloor& floor);

// What happened to the request: refused (not 2xx), failed inside a 200
// stream before any token (a reason and 0 completion tokens), served, or
// unknown (no status).
enum class Disposition { kUnknown, kRefused, kFailedInStream, kServed };

enum class RuleResult {
  kNotApplicable,  // not served, or no text to time
  kUnchecked,      // a field the rule needs is missing on the line
  kPassed,
  kFlagged,
  kTooShort,  // ttft: the floor is below kMinJudgedFloorMs
};

struct Judgement {
  Disposition disposition = Disposition::kUnknown;
  std::array<RuleResult, kNumRules> results{};
  std::array<std::string, kNumRules> missing;  // the field, when unchecked
  bool over_limit_refused = false;             // over the limit and not served
  double floor_ms = -1;  // the first-token floor, when computed
  bool flagged() const;
  std::vector<std::string> Signatures() const;  // kinds, in rule order
};

Judgement JudgeRequest(const LogRecord& r, const RuleSet& rules);

// The finding row of a flagged request: detector log_forensics, the kind of
// its first signature, severity critical when a node failure is among them
// or two signatures agree, else high; reader = the tenant, engine_request
// = the request id where it is numeric. Only ids, counts, timings and the
// class of each node outcome ("abort_reason: INVALID_ARGUMENT"), never the
// outcome's free text. `window` names the time window ("" none: the line
// has no time, and the finding's ts_us is 0, group window "none").
Finding FlaggedFinding(const LogRecord& r, const Judgement& j,
                       const RuleSet& rules, const std::string& window);

// "abort_reason: INVALID_ARGUMENT: prompt of 300 tokens" ->
// "abort_reason: INVALID_ARGUMENT": the leading identifier-like parts of a
// node outcome (at most two); "error" when there are none.
std::string OutcomeClass(const std::string& outcome);

// Requests counted for one tenant (and window).
struct Tally {
  int64_t requests = 0, served = 0, refused = 0, failed_in_stream = 0,
          unknown = 0, over_limit_refused = 0, flagged = 0, too_short = 0;
  // Served requests every enabled rule checked (or found not to apply).
  int64_t fully_checked = 0;
  std::array<int64_t, kNumRules> checked{}, unchecked{}, flagged_by{};
  void Add(const Judgement& j);
  nlohmann::json ToJson() const;
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_FORENSICS_RULES_H_
