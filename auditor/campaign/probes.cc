// One probe of the campaign (Campaign, campaign_internal.h): the prompt
// its kind and tenant call for and the request that carries it, then its
// answer: the evidence row, every detector's judgement, and the findings
// recorded.
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/campaign/campaign_internal.h"
#include "auditor/campaign/logprob_calibration.h"
#include "auditor/detectors/detector.h"
#include "auditor/target/completion.h"
#include "auditor/target/multi_client.h"
#include "auditor/target/rate_limit.h"
#include "auditor/target/target.h"
#include "canaries/templates.h"
#include "common/clock.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::campaign_internal {

namespace {

using json = nlohmann::json;

constexpr int kSniffMaxTokens = 48;

}  // namespace

std::string Campaign::ProbePrompt(Probe* p, int* max_tokens) {
  TenantState& n = tenants_[p->tenant];
  std::string prompt;
  *max_tokens = kSniffMaxTokens;
  switch (p->kind) {
    case ProbeKind::kPlant: {
      const auto& plants = cal_.plants[p->tenant];
      const Plant& plant = plants[n.plant_cursor++ % plants.size()];
      prompt = plant.text;
      p->marker_ids = plant.marker_ids;
      p->predicted = plant.predicted_tokens;
      *max_tokens = kPlantMaxTokens;
      break;
    }
    case ProbeKind::kSniff:
      prompt = canaries::SniffPrompt(p->id, cal_.wording);
      break;
    case ProbeKind::kGolden: {
      // Every tenant goes through every variant in turn.
      auto it = cal_.golden.begin();
      std::advance(it, n.golden_cursor++ % cal_.golden.size());
      p->golden_variant = it->first;
      prompt = cal_.GoldenPromptOf(it->first);
      if (auto t = cal_.golden_tokens.find(it->first);
          t != cal_.golden_tokens.end()) {
        p->predicted = t->second;
      }
      *max_tokens = kGoldenMaxTokens;
      break;
    }
    case ProbeKind::kScore: {
      auto it = cal_.scored.alone.begin();
      std::advance(it, n.score_cursor++ % cal_.scored.alone.size());
      p->golden_variant = it->first;
      prompt = cal_.GoldenPromptOf(it->first);
      *max_tokens = kScoreMaxTokens;
      break;
    }
    case ProbeKind::kEcho:
      prompt = canaries::EchoPrompt(*cal_.nonces[p->tenant], cal_.wording);
      p->marker_ids.push_back(cal_.nonces[p->tenant]->id);
      *max_tokens = kEchoMaxTokens;
      break;
    case ProbeKind::kHangup:
      // Every other round of stages on one of the tenant's plants, which
      // come again later: what an aborted request leaves in a cache is
      // then read back (abort-cache-insert); else on a fresh at-limit
      // prompt, the longest prefill and transfer to land in.
      if ((n.hangup_cursor / kHangupStages) % 2 == 1 &&
          !cal_.plants[p->tenant].empty()) {
        const auto& plants = cal_.plants[p->tenant];
        const Plant& plant = plants[n.plant_cursor++ % plants.size()];
        prompt = plant.text;
        p->marker_ids = plant.marker_ids;
        p->predicted = plant.predicted_tokens;
        p->stream = true;
        *max_tokens = kBoundaryMaxTokens;
        break;
      }
      [[fallthrough]];
    case ProbeKind::kAtLimit:
    case ProbeKind::kPastLimit: {
      const bool past = p->kind == ProbeKind::kPastLimit;
      const int units = past ? cal_.past_limit_units : cal_.at_limit_units;
      p->predicted = cal_.base_tokens + units * cal_.unit_tokens;
      // At the limit always streamed (its first token is timed); past it
      // alternately, so both ways of refusing are seen.
      p->stream = !past || p->id % 2 == 0;
      prompt = BoundaryPrompt(buster_.Next(), units);
      *max_tokens = kBoundaryMaxTokens;
      break;
    }
  }
  p->prompt = prompt;
  return prompt;
}

ProbeRequest Campaign::MakeProbe(Probe* p) {
  int max_tokens = 0;
  const std::string prompt = ProbePrompt(p, &max_tokens);
  // Golden answers carry their log-probabilities where the target gives
  // them; scored prompts are echoed with theirs.
  json extra = nullptr;
  if (p->kind == ProbeKind::kGolden &&
      cal_.golden_logprobs.mode != LogprobMode::kOff) {
    extra = GoldenLogprobsFields();
  }
  if (p->kind == ProbeKind::kScore) extra = ScoreFields();
  ProbeRequest r =
      session_.Request(static_cast<uint64_t>(p->id), o_.tenants[p->tenant],
                       prompt, max_tokens, p->stream, extra);
  if (p->kind == ProbeKind::kHangup) AimHangup(p, &r);
  return r;
}

absl::Status Campaign::RecordProbe(const Probe& p, const Completion& c) {
  const char* kind = ProbeKindName(p.kind);
  const std::string outcome = Outcome(c);
  ++r_.probes;
  ++r_.by_kind[kind];
  ++r_.by_outcome[outcome];
  metrics_->CountProbe(kind, outcome);
  probe_times_.push_back(NowUs());
  if (c.usable) {
    ++r_.usable;
  } else if (!(p.kind == ProbeKind::kPastLimit && IsRefusal(c.status)) &&
             !c.hung_up && !IsRateLimited(c)) {
    error_times_.push_back(probe_times_.back());
  }
  if (c.status == 401 || c.status == 403) ++tenants_[p.tenant].refused;
  if (c.engine_request != 0) {
    io_.engine_requests[c.engine_request] = o_.tenants[p.tenant].name;
  }
  json probe = {{"probe", p.id},
                {"kind", kind},
                {"tenant", o_.tenants[p.tenant].name},
                {"outcome", outcome},
                {"http_status", c.status},
                {"error_in_200", c.http_ok_error},
                {"ms", c.total_ms},
                {"prompt_sha256", Sha256Hex(p.prompt)},
                {"markers", p.marker_ids},
                {"response_id", c.response_id},
                {"engine_request", c.engine_request}};
  if (p.pair >= 0) {
    probe["pair"] = p.pair;
    probe["pair_role"] = p.control ? "control" : "judged";
  }
  if (p.kind == ProbeKind::kHangup) probe["hangup"] = HangupStageName(p.hangup);
  if (p.burst >= 0) probe["burst"] = p.burst;
  if (c.usable) {
    probe["output_sha256"] = Sha256Hex(c.text);
    probe["prompt_tokens"] = c.prompt_tokens;
    if (p.stream) probe["ttft_ms"] = c.ttft_ms;
  }
  return Record("probe", std::move(probe));
}

absl::Status Campaign::OnAnswer(const ProbeResponse& resp,
                                std::map<uint64_t, Probe>* in_flight) {
  const Probe p = std::move((*in_flight)[resp.id]);
  in_flight->erase(resp.id);
  const Completion c = session_.Parse(resp, p.stream);
  session_.Note(o_.tenants[p.tenant], c);
  return Judge(p, c);
}

absl::Status Campaign::Judge(const Probe& sent, const Completion& c) {
  Probe p = sent;
  RETURN_IF_ERROR(Refit(&p, c));
  RETURN_IF_ERROR(RecordProbe(p, c));
  // A 429/503 that was not sent again (its retries spent, the load over,
  // a burst's): no answer for any detector to judge.
  if (IsRateLimited(c)) return Flush();
  std::vector<Finding> found;  // every detector's, in report order
  for (const auto& d : detectors_) {
    FindingList mine;
    d->Judge(p, c, found, mine);
    for (Finding& f : mine.findings) found.push_back(std::move(f));
  }
  for (Finding& x : found) {
    x.probe = p.id;
    x.engine_request = c.engine_request;
    x.detail["probe"] = p.id;
  }
  return AddFindings(std::move(found), /*flush=*/true);
}

absl::Status Campaign::AddFinding(Finding f, bool flush) {
  if (f.ts_us == 0) f.ts_us = NowUs();
  metrics_->CountFinding(f.kind, SeverityName(f.severity));
  json body = f.ToJson();
  r_.findings.push_back(std::move(f));
  return Record("finding", std::move(body), flush);
}

absl::Status Campaign::AddFindings(std::vector<Finding> found, bool flush) {
  for (Finding& f : found) RETURN_IF_ERROR(AddFinding(std::move(f), false));
  return flush ? Flush() : absl::OkStatus();
}

}  // namespace kvcanary::auditor::campaign_internal
