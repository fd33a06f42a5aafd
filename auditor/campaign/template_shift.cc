// The template's tokens re-checked during the campaign (Campaign::Refit,
// campaign_internal.h): a chat template that prints today's date gains or
// loses a token at midnight, and every prompt's count moves with it. A
// uniform shift — a short control alone moved by as much — is refit and
// noted, and golden's answers alone measured again (a model that reads
// the date may answer differently); a count that moved alone (a prompt cut, a
// prompt padded) is left to the detectors.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auditor/campaign/campaign_internal.h"
#include "auditor/campaign/logprob_calibration.h"
#include "auditor/target/prompts.h"
#include "common/status_macros.h"

namespace kvcanary::auditor::campaign_internal {

namespace {

// The most tokens a template's shift is taken for (a date line, a time).
constexpr int kMaxTemplateShift = 8;
// Controls per campaign at most: a target whose counts wander is judged
// by the detectors, not re-checked forever.
constexpr int kMaxShiftChecks = 12;

// Adds `value` to `also` unless it is `first` or already there; whether
// it was added.
template <typename T>
bool AddIfNew(const T& first, const T& value, std::vector<T>* also) {
  if (value == first ||
      std::find(also->begin(), also->end(), value) != also->end()) {
    return false;
  }
  also->push_back(value);
  return true;
}

}  // namespace

absl::Status Campaign::Refit(Probe* p, const Completion& c) {
  if (p->predicted <= 0) return absl::OkStatus();
  const int now = p->predicted + shift_;
  if (!c.usable || c.prompt_tokens < 0 || c.prompt_tokens == now) {
    p->predicted = now;
    return absl::OkStatus();
  }
  // Sent before the last refit: the shift then may be the one it met.
  if (p->id < shift_from_ && c.prompt_tokens == p->predicted + prev_shift_) {
    p->predicted += prev_shift_;
    return absl::OkStatus();
  }
  const int d = c.prompt_tokens - now;
  p->predicted = now;
  if (std::abs(d) <= cal_.tolerance || std::abs(d) > kMaxTemplateShift ||
      cal_.unit_tokens == 0 || shift_checks_ >= kMaxShiftChecks) {
    return absl::OkStatus();
  }
  // A short cache-busted prompt whose count calibration measured, alone.
  ++shift_checks_;
  const int expected = cal_.base_tokens + cal_.unit_tokens + shift_;
  const Completion k = session_.SendAlone(
      o_.tenants[p->tenant], BoundaryPrompt(buster_.Next(), 1), 1, false);
  RETURN_IF_ERROR(session_.down());
  if (!k.usable || k.prompt_tokens < 0 ||
      std::abs(k.prompt_tokens - expected - d) > cal_.tolerance) {
    return absl::OkStatus();  // not uniform: the detectors judge it
  }
  prev_shift_ = shift_;
  shift_ += d;
  shift_from_ = next_probe_;
  p->predicted = now + d;
  int rebaselined = 0;
  RETURN_IF_ERROR(RebaselineGolden(&rebaselined));
  shift_notes_.push_back(absl::StrCat(
      "every prompt's count moved by ", d > 0 ? "+" : "", d,
      " tokens at probe ", p->id, " (a short control alone moved as much: ",
      k.prompt_tokens, " for ", expected,
      "), as a chat template that prints the date does; refit, no finding",
      rebaselined > 0 ? absl::StrCat("; ", rebaselined,
                                     " golden answers alone changed with it "
                                     "and are accepted beside the first")
                      : ""));
  return Record("template_shift", {{"probe", p->id},
                                   {"tokens", d},
                                   {"shift", shift_},
                                   {"control_prompt_tokens", k.prompt_tokens},
                                   {"control_expected", expected},
                                   {"golden_rebaselined", rebaselined}});
}

absl::Status Campaign::RebaselineGolden(int* changed) {
  LogprobCalibration& lp = cal_.golden_logprobs;
  const bool logprobs = lp.mode != LogprobMode::kOff;
  for (const auto& [v, first] : cal_.golden) {
    const Completion a = session_.SendAlone(
        o_.tenants[0], cal_.GoldenPromptOf(v), kGoldenMaxTokens, false,
        logprobs ? GoldenLogprobsFields() : nlohmann::json(nullptr));
    RETURN_IF_ERROR(session_.down());
    if (!a.usable) continue;
    if (logprobs && lp.alone.count(v) > 0 && a.logprobs.present &&
        a.logprobs.malformed.empty()) {
      AddIfNew(lp.alone.at(v), a.logprobs.positions, &lp.also[v]);
    }
    *changed += AddIfNew(first, a.text, &cal_.golden_also[v]);
  }
  return absl::OkStatus();
}

}  // namespace kvcanary::auditor::campaign_internal
