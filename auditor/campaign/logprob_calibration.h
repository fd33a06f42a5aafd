// What the target does with log-probabilities, measured alone after the
// rest of calibration (auditor/campaign/calibrate.h): each golden variant
// asked twice with `logprobs` (logprob_golden) and scored twice with
// `echo` + `logprobs` (prompt_logprobs), and twice each under same-tenant
// load. Recorded positions, whether the answers alone and under that load
// are bitwise the same (exact mode) or not (distance mode),
// or why the target gives none (the detector is disabled, saying so).
#ifndef KVCANARY_AUDITOR_CAMPAIGN_LOGPROB_CALIBRATION_H_
#define KVCANARY_AUDITOR_CAMPAIGN_LOGPROB_CALIBRATION_H_

#include <functional>
#include <string>

#include "auditor/calibration/calibration.h"
#include "auditor/campaign/calibrate.h"
#include "auditor/target/completion.h"
#include "auditor/target/tenants.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

// Sends one request alone, `extra` fields added to its body, and parses it.
using SendAloneWith = std::function<Completion(
    const AuditTenant& tenant, const std::string& prompt, int max_tokens,
    bool stream, const nlohmann::json& extra)>;

// The body fields of a golden probe asking for log-probabilities, and of a
// scored prompt.
nlohmann::json GoldenLogprobsFields();
nlohmann::json ScoreFields();
inline constexpr int kScoreMaxTokens = 1;

// Fills c->golden_logprobs and c->scored, sending as `tenant`. REQUIRES:
// c->golden measured (with none, both are disabled saying so). `chat`:
// requests go through chat completions, which have no echo, so scored
// prompts are disabled saying so, without a request. `loaded` (where set):
// a variant whose two answers alone agree is sent twice more that way, and
// judged by distance where those differ. A golden variant judged by
// distance is judged by rate by golden too (c->golden_by_rate).
void CalibrateLogprobs(const AuditTenant& tenant, const SendAloneWith& send,
                       Calibration* c, bool chat = false,
                       const SendLoaded& loaded = nullptr);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_CAMPAIGN_LOGPROB_CALIBRATION_H_
