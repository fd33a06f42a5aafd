// What the acceptance sweep found at each length, as the checks it states
// (one JUnit case each: check "echo" at "length 257, end") and the
// coverage its verdict rests on. Filled in by auditor/audits/accept/accept.cc
// as answers come back; pure bookkeeping. Not thread-safe.
#ifndef KVCANARY_AUDITOR_AUDITS_ACCEPT_CHECKS_H_
#define KVCANARY_AUDITOR_AUDITS_ACCEPT_CHECKS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "auditor/audits/accept/plan.h"
#include "auditor/result/result.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// Precedence when several answers speak to one check: failed over error
// over passed over skipped.
enum class CheckState { kSkipped = 0, kPassed = 1, kError = 2, kFailed = 3 };
const char* CheckStateName(CheckState s);  // skipped, passed, error, failed

// One check's state: the worst noted, with the first message of that state.
struct CheckNote {
  CheckState state = CheckState::kSkipped;
  std::string message;
  bool noted = false;
  void Note(CheckState s, const std::string& why);
  bool judged() const {
    return noted &&
           (state == CheckState::kPassed || state == CheckState::kFailed);
  }
};

// One swept length: the fill of each kind that could be built at it, and
// every check's state.
struct LengthState {
  SweepLength length;
  std::map<PromptKind, Fill> fills;
  CheckNote prompt_tokens;  // within and past (a 200 with a count)
  CheckNote refusal;        // past only
  // Past the limit: 200s without an answer (a stream dropped after its
  // headers), neither a refusal nor an admission.
  int unanswered = 0;
  CheckNote golden, golden_under_load;
  std::map<PromptKind, CheckNote> echo;  // per position
  int counted = 0, counted_ok = 0;       // answers whose count was compared
  std::vector<int> merged;  // planned lengths that sent these same prompts
  // Echo alone (calibration of this pair): runs, and how many echoed.
  std::map<PromptKind, int> echo_runs, echo_echoed;
  std::map<PromptKind, bool> echo_covered;
  std::string golden_prefix;  // one prompt per length: same answer expected
  std::optional<std::string> golden_answer;  // agreed alone
};

// "length 257" / "length 257, end" (an echo kind names its position): the
// length `kind`'s prompt was sent at — its fill's predicted count, which
// without a one-token pad can be below the planned length — or the planned
// length where the kind has no fill.
std::string Subject(const LengthState& l, PromptKind kind);

// True if `a` and `b` send the same prompts (every kind's fill the same):
// the plan keeps one of them.
bool SameFills(const LengthState& a, const LengthState& b);

// The checks of every length, in order: prompt_tokens, echo per position,
// golden, golden_under_load (with_load only); refusal past the limit. Two
// checks naming the same (check, subject) are one, in the worse state.
std::vector<Check> StatedChecks(const std::vector<LengthState>& lengths,
                                bool with_load);

// The covered (length, position) pairs as text per position: "end
// 15..256; start 15..47" ("none" if none).
std::string CoveredText(const std::vector<LengthState>& lengths);

// Lengths within the limit where the end position did not echo k of k
// alone though it did at a shorter length: the end nonce is as far from
// the ask at every length, so such a gap is worth a look (details only).
std::vector<int> EndEchoGaps(const std::vector<LengthState>& lengths);

// The per-length part of the details: target, why, fills, check states.
nlohmann::json LengthsJson(const std::vector<LengthState>& lengths);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_ACCEPT_CHECKS_H_
