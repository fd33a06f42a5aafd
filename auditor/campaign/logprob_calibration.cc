#include "auditor/campaign/logprob_calibration.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvcanary::auditor {
namespace {

// Why an answer alone gives nothing to judge ("" when it does). `what`
// names the request ("logprobs: 5").
std::string Unusable(const Completion& a, const std::string& what) {
  if (!a.usable) {
    return absl::StrCat("the target answered a golden prompt with ", what,
                        " alone with HTTP ", a.status,
                        a.http_ok_error ? " (an error inside a 200)" : "");
  }
  if (!a.logprobs.present) {
    return absl::StrCat("the target returns no log-probabilities (", what,
                        " answered with logprobs null or absent)");
  }
  if (!a.logprobs.malformed.empty()) return a.logprobs.malformed;
  if (a.logprobs.positions.empty()) {
    return absl::StrCat("the target answered ", what, " with no positions");
  }
  return "";
}

// One kind, every golden variant twice. `scored`: echo's answers must hold
// the prompt (its text first, and more positions than the one generated).
LogprobCalibration Measure(const AuditTenant& tenant, const SendAloneWith& send,
                           const SendLoaded& loaded, const Calibration& c,
                           const nlohmann::json& extra, int max_tokens,
                           bool scored, int* requests) {
  LogprobCalibration out;
  const std::string what = extra.dump();
  for (const auto& [v, text] : c.golden) {
    const std::string prompt = c.GoldenPromptOf(v);
    const Completion a = send(tenant, prompt, max_tokens, false, extra);
    const Completion b = send(tenant, prompt, max_tokens, false, extra);
    *requests += 2;
    std::string why = Unusable(a, what);
    if (why.empty() && scored &&
        (!absl::StartsWith(a.text, prompt) ||
         static_cast<int>(a.logprobs.positions.size()) <= max_tokens)) {
      why = absl::StrCat("the target ignores echo with logprobs (", what,
                         " came back without the prompt's positions)");
    }
    if (!why.empty()) {
      out.disabled = why;
      out.alone.clear();
      return out;
    }
    out.alone[v] = a.logprobs.positions;
    if (!b.usable || b.logprobs.positions != a.logprobs.positions) {
      out.by_distance.insert(v);
      continue;
    }
    // Twice more with the load's batch shapes, same tenant only.
    for (int i = 0; i < 2 && loaded; ++i) {
      ++*requests;
      const Completion l = loaded(tenant, prompt, max_tokens, extra);
      if (!l.usable || l.logprobs.positions != a.logprobs.positions) {
        out.by_distance.insert(v);
        out.moved_under_load.insert(v);
        break;
      }
    }
  }
  out.mode =
      out.by_distance.empty() ? LogprobMode::kExact : LogprobMode::kDistance;
  return out;
}

}  // namespace

nlohmann::json GoldenLogprobsFields() {
  return {{"logprobs", kGoldenTopLogprobs}};
}

nlohmann::json ScoreFields() {
  return {{"echo", true}, {"logprobs", kScoreTopLogprobs}};
}

void CalibrateLogprobs(const AuditTenant& tenant, const SendAloneWith& send,
                       Calibration* c, bool chat, const SendLoaded& loaded) {
  if (c->golden.empty()) {
    c->golden_logprobs.disabled = c->scored.disabled =
        "no golden prompt was calibrated";
    return;
  }
  c->golden_logprobs = Measure(tenant, send, loaded, *c, GoldenLogprobsFields(),
                               kGoldenMaxTokens,
                               /*scored=*/false, &c->requests);
  // Figures that move with the batch can flip a greedy token under any
  // load, though the four answers calibration saw kept their text: golden
  // judges those variants by rate too.
  for (const int v : c->golden_logprobs.by_distance) {
    if (c->golden_by_rate.insert(v).second) {
      c->golden_moved_under_load.insert(v);
    }
  }
  if (chat) {
    c->scored = LogprobCalibration();
    c->scored.disabled =
        "chat completions have no echo: a prompt's own log-probabilities "
        "cannot be asked (the target is audited over chat)";
    return;
  }
  c->scored = Measure(tenant, send, loaded, *c, ScoreFields(), kScoreMaxTokens,
                      /*scored=*/true, &c->requests);
}

}  // namespace kvcanary::auditor
