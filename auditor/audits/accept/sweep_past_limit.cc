// Past the limit (AcceptSweep, sweep.h): each length past it sent plain
// and streamed, the streamed control that makes a streamed refusal mean
// something, and each answer judged as a refusal (a 4xx) or not.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/audits/accept/sweep.h"
#include "auditor/detectors/boundary.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

// A 4xx that says something other than "too long": the key, the rate, a
// timeout. Neither a refusal of the length nor an answer.
bool OtherClientError(int status) {
  return status == 401 || status == 403 || status == 408 || status == 429;
}

}  // namespace

// The positive control of streamed refusals: a streamed count probe at
// the longest length within the limit must be answered, or a streamed
// "refusal" past it may be a target that refuses every stream.
absl::Status AcceptSweep::StreamControl() {
  if (t_.refuse_above == 0) return absl::OkStatus();
  size_t at = t_.lengths.size();
  for (size_t i = 0; i < t_.lengths.size(); ++i) {
    if (!t_.lengths[i].length.past &&
        t_.lengths[i].fills.count(PromptKind::kCount)) {
      at = i;
    }
  }
  if (at == t_.lengths.size()) {
    t_.stream_control = "no length within the limit to stream";
    return absl::OkStatus();
  }
  AcceptProbe p = MakeProbe(at, PromptKind::kCount, AcceptPhase::kAlone);
  p.stream = true;
  const Completion c = SendAlone(p);
  RETURN_IF_ERROR(session_->down());
  t_.stream_control_usable = c.usable;
  t_.stream_control =
      absl::StrCat("a streamed prompt of ",
                   t_.lengths[at].fills.at(PromptKind::kCount).predicted,
                   " tokens (within the limit) got ",
                   c.usable ? std::string("an answer") : UnusableWhy(c));
  if (!c.usable) {
    t_.lengths[at].prompt_tokens.Note(CheckState::kError,
                                      absl::StrCat(UnusableWhy(c),
                                                   " streamed, within "
                                                   "the limit"));
  }
  return Observe(p, c);
}

// Past the limit: each length plain and streamed, alone, so both ways of
// refusing (a status, an error inside a 200 stream) are seen.
absl::Status AcceptSweep::PastLimit() {
  for (size_t i = 0; i < t_.lengths.size(); ++i) {
    if (!t_.lengths[i].length.past) continue;
    if (!t_.lengths[i].fills.count(PromptKind::kCount)) continue;
    for (bool stream : {false, true}) {
      AcceptProbe p = MakeProbe(i, PromptKind::kCount, AcceptPhase::kPast);
      p.stream = stream;
      const Completion c = SendAlone(p);
      RETURN_IF_ERROR(session_->down());
      RETURN_IF_ERROR(Observe(p, c));
      if (stream && !t_.stream_control_usable && c.status >= 400 &&
          c.status < 500 && !OtherClientError(c.status)) {
        t_.lengths[i].refusal.Note(
            CheckState::kError,
            absl::StrCat("streamed refusal not trusted: ", t_.stream_control));
      }
    }
  }
  return absl::OkStatus();
}

void AcceptSweep::JudgePastLimitAnswer(const AcceptProbe& p,
                                       const Completion& c,
                                       std::vector<Finding>* found) {
  LengthState& l = t_.lengths[p.length];
  const int predicted = l.fills.at(p.kind).predicted;
  const std::string how = p.stream ? "streamed" : "plain";
  // Processed, not refused: a finding whatever the count says.
  BoundaryObservation o{
      predicted,          t_.refuse_above,       200,
      c.prompt_tokens,    cal_.filler.tolerance, sweeper().name,
      "accept_past_limit"};
  std::vector<Finding> b = JudgeBoundary(o);
  l.refusal.Note(
      CheckState::kFailed,
      absl::StrCat("HTTP 200 (", how, ") for a prompt of ", predicted,
                   " tokens past the limit of ", t_.refuse_above,
                   ": not refused, so not processed as sent "
                   "(usage.prompt_tokens ",
                   c.prompt_tokens, ")"));
  if (c.prompt_tokens >= 0) {
    ++l.counted;
    const bool cut = std::any_of(b.begin(), b.end(), [](const Finding& f) {
      return f.kind != "boundary_accepted";
    });
    if (cut) {
      l.prompt_tokens.Note(CheckState::kFailed,
                           absl::StrCat("usage.prompt_tokens ", c.prompt_tokens,
                                        " for a prompt of ", predicted, " ± ",
                                        cal_.filler.tolerance,
                                        " tokens: not the prompt as sent"));
    } else {
      ++l.counted_ok;
      l.prompt_tokens.Note(CheckState::kPassed, "");
    }
  }
  for (Finding& f : b) found->push_back(std::move(f));
}

void AcceptSweep::JudgeRefusal(const AcceptProbe& p, const Completion& c,
                               std::vector<Finding>* found) {
  if (c.usable) {
    JudgePastLimitAnswer(p, c, found);
    return;
  }
  LengthState& l = t_.lengths[p.length];
  const int predicted = l.fills.at(p.kind).predicted;
  const std::string how = p.stream ? "streamed" : "plain";
  const int s = c.status;
  if (s == 200 && !c.http_ok_error) {
    // A 200 without an answer (a stream the server dropped after its
    // headers, as TGI's chat stream does past the limit): neither a
    // refusal nor an admission. Counted in by_outcome (dropped_stream,
    // bad_response), never judged.
    ++l.unanswered;
    return;
  }
  if (s == 0 || OtherClientError(s)) {
    l.refusal.Note(CheckState::kError,
                   absl::StrCat(UnusableWhy(c), " (", how,
                                "): neither a refusal of the length nor an "
                                "answer"));
    return;
  }
  if (s >= 400 && s < 500) {
    l.refusal.Note(CheckState::kPassed,
                   absl::StrCat("refused: HTTP ", s, " (", how, ")"));
    return;
  }
  // A 5xx is not a refusal: the target admitted the prompt and failed on it.
  l.refusal.Note(
      CheckState::kFailed,
      absl::StrCat(UnusableWhy(c), " (", how, ") for a prompt of ", predicted,
                   " tokens past the limit of ", t_.refuse_above,
                   ": a 5xx is not a refusal (the prompt was admitted and "
                   "failed); a 4xx is required"));
  Finding f;
  f.detector = "boundary";
  f.kind = "boundary_not_refused";
  f.severity = Severity::kMedium;
  f.reader = sweeper().name;
  f.group = {{"template", "accept_past_limit"}};
  f.detail = {{"tenant", sweeper().name},
              {"predicted_prompt_tokens", predicted},
              {"limit", t_.refuse_above},
              {"http_status", s},
              {"error_in_200", c.http_ok_error}};
  found->push_back(std::move(f));
}
}  // namespace kvcanary::auditor
