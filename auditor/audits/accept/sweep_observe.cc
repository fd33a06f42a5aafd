// Every answer the acceptance sweep gets (AcceptSweep, sweep.h): its
// evidence row and metrics, its prompt-token count against the predicted
// one, the judgement of its pass, and its findings recorded.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/audits/accept/sweep.h"
#include "auditor/detectors/boundary.h"
#include "auditor/target/completion.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

}  // namespace

absl::Status AcceptSweep::Observe(const AcceptProbe& p, const Completion& c) {
  const std::string kind = absl::StrCat("accept_", PromptKindName(p.kind));
  const std::string outcome = Outcome(c);
  const LengthState& l = t_.lengths[p.length];
  ++t_.requests;
  ++t_.by_kind[kind];
  ++t_.by_outcome[outcome];
  if (c.usable) ++t_.usable;
  metrics_->CountProbe(kind, outcome);
  if (c.status == 401 || c.status == 403) ++t_.refused[sweeper().name];
  json row = {{"probe", p.id},
              {"kind", kind},
              {"phase", AcceptPhaseName(p.phase)},
              {"length", l.length.tokens},
              {"predicted", l.fills.at(p.kind).predicted},
              {"tenant", sweeper().name},
              {"outcome", outcome},
              {"http_status", c.status},
              {"error_in_200", c.http_ok_error},
              {"stream", p.stream},
              {"ms", c.total_ms},
              {"prompt_sha256", Sha256Hex(p.prompt)},
              {"response_id", c.response_id},
              {"engine_request", c.engine_request}};
  if (c.usable) {
    row["output_sha256"] = Sha256Hex(c.text);
    row["prompt_tokens"] = c.prompt_tokens;
    row["cached_tokens"] = c.cached_tokens;
  }
  RETURN_IF_ERROR(Record("probe", std::move(row)));
  std::vector<Finding> found;
  if (p.phase == AcceptPhase::kPast) {
    JudgeRefusal(p, c, &found);
  } else if (c.usable) {
    JudgeCount(p, c, &found);
  }
  if (p.phase == AcceptPhase::kCheck || p.phase == AcceptPhase::kUnderLoad) {
    JudgeCheckPass(p, c, &found);
  }
  Progress();
  return AddFindings(p, c, std::move(found));
}

void AcceptSweep::JudgeCount(const AcceptProbe& p, const Completion& c,
                             std::vector<Finding>* found) {
  LengthState& l = t_.lengths[p.length];
  const int predicted = l.fills.at(p.kind).predicted;
  if (c.prompt_tokens < 0) {
    l.prompt_tokens.Note(CheckState::kError,
                         "HTTP 200 without usage.prompt_tokens");
    return;
  }
  ++l.counted;
  BoundaryObservation o{
      predicted,      0,       200, c.prompt_tokens, cal_.filler.tolerance,
      sweeper().name, "accept"};
  std::vector<Finding> counts = JudgeBoundary(o);
  if (counts.empty()) {
    ++l.counted_ok;
    l.prompt_tokens.Note(CheckState::kPassed, "");
    return;
  }
  l.prompt_tokens.Note(
      CheckState::kFailed,
      absl::StrCat("usage.prompt_tokens ", c.prompt_tokens, ", predicted ",
                   predicted, " ± ", cal_.filler.tolerance, " (",
                   PromptKindName(p.kind), " prompt, ",
                   AcceptPhaseName(p.phase), "): ",
                   counts[0].kind == "prompt_truncated"
                       ? "part of the prompt was not processed"
                       : "the prompt was not processed as sent"));
  for (Finding& f : counts) found->push_back(std::move(f));
}

absl::Status AcceptSweep::AddFindings(const AcceptProbe& p, const Completion& c,
                                      std::vector<Finding> found) {
  for (Finding& f : found) {
    f.ts_us = NowUs();
    f.probe = p.id;
    f.engine_request = c.engine_request;
    f.detail["probe"] = p.id;
    f.detail["length"] = t_.lengths[p.length].length.tokens;
    f.detail["prompt_kind"] = PromptKindName(p.kind);
    f.detail["phase"] = AcceptPhaseName(p.phase);
    metrics_->CountFinding(f.kind, SeverityName(f.severity));
    json body = f.ToJson();
    t_.findings.push_back(std::move(f));
    RETURN_IF_ERROR(Record("finding", std::move(body), /*flush=*/true));
  }
  return absl::OkStatus();
}
}  // namespace kvcanary::auditor
