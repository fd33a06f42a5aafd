#include "auditor/audits/forensics/rules.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/clock.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

bool IsOk(const std::string& outcome) {
  return absl::AsciiStrToLower(absl::StripAsciiWhitespace(outcome)) == "ok";
}

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || s.size() > 40) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

void JudgeOverLimit(const LogRecord& r, const RuleSet& rules, Judgement* j) {
  if (!r.prompt_tokens.has_value()) {
    if (j->disposition == Disposition::kServed) {
      j->results[kOverLimitRule] = RuleResult::kUnchecked;
      j->missing[kOverLimitRule] = "prompt_tokens";
    }
    return;
  }
  const bool over = *r.prompt_tokens > rules.input_limit;
  if (j->disposition != Disposition::kServed) {
    j->over_limit_refused = over;
    return;
  }
  j->results[kOverLimitRule] =
      over ? RuleResult::kFlagged : RuleResult::kPassed;
}

void JudgeTtft(const LogRecord& r, const RuleSet& rules, Judgement* j) {
  if (r.completion_tokens.has_value() && *r.completion_tokens == 0) return;
  RuleResult& out = j->results[kTtftRule];
  if (!r.prompt_tokens.has_value() || !r.ttft_ms.has_value()) {
    out = RuleResult::kUnchecked;
    j->missing[kTtftRule] = r.prompt_tokens ? "ttft_ms" : "prompt_tokens";
    return;
  }
  const int64_t uncached =
      std::max<int64_t>(0, *r.prompt_tokens - r.cached_tokens.value_or(0));
  j->floor_ms = rules.floor.us_per_token * static_cast<double>(uncached) / 1e3;
  if (j->floor_ms < kMinJudgedFloorMs) {
    out = RuleResult::kTooShort;
  } else {
    out = *r.ttft_ms < j->floor_ms ? RuleResult::kFlagged : RuleResult::kPassed;
  }
}

void JudgeNodes(const LogRecord& r, Judgement* j) {
  RuleResult& out = j->results[kNodeFailureRule];
  if (!r.prefill_outcome.has_value() && !r.decode_outcome.has_value()) {
    out = RuleResult::kUnchecked;
    j->missing[kNodeFailureRule] = "prefill_outcome, decode_outcome";
    return;
  }
  const bool failed = (r.prefill_outcome && !IsOk(*r.prefill_outcome)) ||
                      (r.decode_outcome && !IsOk(*r.decode_outcome));
  out = failed ? RuleResult::kFlagged : RuleResult::kPassed;
}

}  // namespace

const char* RuleKind(int rule) {
  switch (rule) {
    case kOverLimitRule:
      return "over_limit_served";
    case kTtftRule:
      return "ttft_below_floor";
    case kNodeFailureRule:
      return "served_after_node_failure";
  }
  return "unknown";
}

RuleSet MakeRuleSet(const LogFormat& format, int input_limit,
                    const TtftFloor& floor) {
  RuleSet s;
  s.input_limit = input_limit;
  s.floor = floor;
  RuleState& over = s.rules[kOverLimitRule];
  over.required = true;
  over.enabled = format.Maps("status") && format.Maps("prompt_tokens");
  if (!over.enabled) {
    over.why_not = "the log records no status or no prompt_tokens";
  }
  over.method = absl::StrCat("status 2xx and prompt_tokens > ", input_limit,
                             " (--input-limit): a prompt over the serving "
                             "limit was answered");
  RuleState& ttft = s.rules[kTtftRule];
  ttft.method = absl::StrFormat(
      "status 2xx and ttft_ms < %.3f us/token x (prompt_tokens - "
      "cached_tokens) (%s), judged where that floor is >= %.1f ms; requests "
      "with 0 completion tokens are not timed",
      floor.us_per_token, floor.source, kMinJudgedFloorMs);
  if (floor.us_per_token <= 0) {
    ttft.why_not = absl::StrCat("no first-token floor: ", floor.source);
  } else if (!format.Maps("ttft_ms")) {
    ttft.required = floor.from_flag;
    ttft.why_not = "the log records no first-token time (ttft_ms)";
  } else {
    ttft.enabled = ttft.required = true;
    if (!format.Maps("cached_tokens")) {
      absl::StrAppend(&ttft.method,
                      "; the log records no cached_tokens, so a prompt-cache "
                      "hit is counted as prefill");
    }
  }
  RuleState& node = s.rules[kNodeFailureRule];
  node.enabled = node.required =
      format.Maps("prefill_outcome") || format.Maps("decode_outcome");
  if (!node.enabled) {
    node.why_not =
        "the log records no node outcome (prefill_outcome, decode_outcome)";
  }
  node.method =
      "status 2xx while prefill_outcome or decode_outcome is neither \"ok\" "
      "nor absent: a node recorded an abort or a transfer failure, yet a "
      "completion was returned";
  return s;
}

bool Judgement::flagged() const {
  return std::find(results.begin(), results.end(), RuleResult::kFlagged) !=
         results.end();
}

std::vector<std::string> Judgement::Signatures() const {
  std::vector<std::string> out;
  for (int i = 0; i < kNumRules; ++i) {
    if (results[i] == RuleResult::kFlagged) out.push_back(RuleKind(i));
  }
  return out;
}

Judgement JudgeRequest(const LogRecord& r, const RuleSet& rules) {
  Judgement j;
  j.results.fill(RuleResult::kNotApplicable);
  if (!r.status.has_value()) {
    for (int i = 0; i < kNumRules; ++i) {
      if (!rules.rules[i].enabled) continue;
      j.results[i] = RuleResult::kUnchecked;
      j.missing[i] = "status";
    }
    return j;
  }
  const bool ok = *r.status >= 200 && *r.status < 300;
  if (!ok) {
    j.disposition = Disposition::kRefused;
  } else if (r.reason.has_value() && r.completion_tokens.value_or(-1) == 0) {
    j.disposition = Disposition::kFailedInStream;
  } else {
    j.disposition = Disposition::kServed;
  }
  if (rules.rules[kOverLimitRule].enabled) JudgeOverLimit(r, rules, &j);
  if (j.disposition != Disposition::kServed) return j;
  if (rules.rules[kTtftRule].enabled) JudgeTtft(r, rules, &j);
  if (rules.rules[kNodeFailureRule].enabled) JudgeNodes(r, &j);
  return j;
}

std::string OutcomeClass(const std::string& outcome) {
  if (IsOk(outcome)) return "ok";
  std::vector<std::string> parts;
  for (absl::string_view p : absl::StrSplit(outcome, ':')) {
    p = absl::StripAsciiWhitespace(p);
    if (!IsIdentifier(p) || parts.size() == 2) break;
    parts.emplace_back(p);
  }
  return parts.empty() ? "error" : absl::StrJoin(parts, ": ");
}

Finding FlaggedFinding(const LogRecord& r, const Judgement& j,
                       const RuleSet& rules, const std::string& window) {
  const std::vector<std::string> signatures = j.Signatures();
  Finding f;
  f.detector = "log_forensics";
  f.kind = signatures.empty() ? "unknown" : signatures.front();
  const bool node_failure = j.results[kNodeFailureRule] == RuleResult::kFlagged;
  f.severity = node_failure || signatures.size() >= 2 ? Severity::kCritical
                                                      : Severity::kHigh;
  f.ts_us = r.ts_us.value_or(0);  // 0: the log gave no time
  f.reader = r.tenant.value_or("");
  uint64_t id = 0;
  if (r.request_id && absl::SimpleAtoi(*r.request_id, &id)) {
    f.engine_request = id;
  }
  f.group = {{"window", window.empty() ? "none" : window}};
  json d = {{"request_id", r.request_id ? json(*r.request_id) : json()},
            {"tenant", r.tenant ? json(*r.tenant) : json()},
            {"line", r.line},
            {"ts", r.ts_us ? json(Rfc3339Utc(*r.ts_us)) : json()},
            {"window", window.empty() ? json() : json(window)},
            {"signatures", signatures},
            {"status", *r.status}};
  auto put = [&d](const char* key, const auto& v) {
    if (v.has_value()) d[key] = *v;
  };
  put("prompt_tokens", r.prompt_tokens);
  put("cached_tokens", r.cached_tokens);
  put("completion_tokens", r.completion_tokens);
  put("ttft_ms", r.ttft_ms);
  if (j.results[kOverLimitRule] == RuleResult::kFlagged) {
    d["input_limit"] = rules.input_limit;
  }
  if (j.floor_ms >= 0) d["floor_ms"] = j.floor_ms;
  if (!r.file.empty()) d["file"] = r.file;
  if (r.prefill_outcome) {
    d["prefill_outcome"] = OutcomeClass(*r.prefill_outcome);
  }
  if (r.decode_outcome) d["decode_outcome"] = OutcomeClass(*r.decode_outcome);
  f.detail = std::move(d);
  return f;
}

void Tally::Add(const Judgement& j) {
  ++requests;
  switch (j.disposition) {
    case Disposition::kUnknown:
      ++unknown;
      break;
    case Disposition::kRefused:
      ++refused;
      break;
    case Disposition::kFailedInStream:
      ++failed_in_stream;
      break;
    case Disposition::kServed:
      ++served;
      break;
  }
  if (j.over_limit_refused) ++over_limit_refused;
  bool all_checked = true;
  for (int i = 0; i < kNumRules; ++i) {
    switch (j.results[i]) {
      case RuleResult::kUnchecked:
        ++unchecked[i];
        all_checked = false;
        break;
      case RuleResult::kFlagged:
        ++flagged_by[i];
        ++checked[i];
        break;
      case RuleResult::kPassed:
        ++checked[i];
        break;
      case RuleResult::kTooShort:
        ++too_short;
        break;
      case RuleResult::kNotApplicable:
        break;
    }
  }
  if (j.flagged()) ++flagged;
  if (j.disposition == Disposition::kServed && all_checked) ++fully_checked;
}

json Tally::ToJson() const {
  json by_kind = json::object(), unchecked_by = json::object();
  for (int i = 0; i < kNumRules; ++i) {
    by_kind[RuleKind(i)] = flagged_by[i];
    unchecked_by[RuleKind(i)] = unchecked[i];
  }
  return {{"requests", requests},
          {"served", served},
          {"refused", refused},
          {"failed_in_stream", failed_in_stream},
          {"no_status", unknown},
          {"over_limit_refused", over_limit_refused},
          {"flagged_at_least", flagged},
          {"flagged_by_signature", by_kind},
          {"unchecked_by_rule", unchecked_by},
          {"ttft_too_short_to_judge", too_short}};
}

}  // namespace kvcanary::auditor
