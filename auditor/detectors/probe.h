// The probes a campaign sends, as the detectors see them: the kind of each
// (which detectors it feeds) and what was sent, so that an answer can be
// judged against it.
#ifndef KVCANARY_AUDITOR_DETECTORS_PROBE_H_
#define KVCANARY_AUDITOR_DETECTORS_PROBE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvcanary::auditor {

enum class ProbeKind {
  kPlant,      // a prompt dense with the tenant's markers
  kSniff,      // a prompt that invites continuation
  kGolden,     // a fixed greedy prompt, answered alone during calibration
  kEcho,       // asks the model to repeat the tenant's nonce
  kAtLimit,    // streamed, cache-busted, at the input limit
  kPastLimit,  // past the input limit (alternately streamed)
  // Streamed, cache-busted, at the input limit, and hung up on purpose at
  // one stage of the request (HangupStage): an exercise of the target's
  // abort paths, never an answer.
  kHangup,
  // A golden prompt scored: echo with logprobs, one token generated, so
  // the answer holds the prompt's own token log-probabilities.
  kScore,
};
inline constexpr int kProbeKinds = 8;

// When a hang-up probe's client gives up, aimed from outside by the time an
// at-limit prompt takes alone (a black box shows no stage; a trace does).
enum class HangupStage {
  kQueued,    // 1 ms after sending: before any work starts under load
  kPrefill,   // 30-70% of its time to first token alone
  kTransfer,  // 80-100%: where a split engine ships the prompt's K/V
  kDecode,    // at its first token
};
inline constexpr int kHangupStages = 4;
const char* HangupStageName(HangupStage s);  // queued, prefill, ...
const char* ProbeKindName(ProbeKind k);      // plant, sniff, golden, echo, ...

// One probe as it was sent.
struct Probe {
  int64_t id = 0;
  ProbeKind kind = ProbeKind::kSniff;
  int tenant = 0;  // index into the campaign's tenants
  bool stream = false;
  bool baseline = false;    // sent in golden's same-tenant baseline phase
  int golden_variant = -1;  // kGolden, kScore: which variant
  int predicted = 0;  // prompt tokens the auditor predicts (0: not predicted)
  // A timed pair (DetectorSpec::paired): the pair's number, and whether this
  // is its control (a cache-busted prompt at the limit sent back to back
  // with the judged one, in random order); -1: not paired.
  int64_t pair = -1;
  bool control = false;
  HangupStage hangup = HangupStage::kQueued;  // kHangup only
  // A burst (DetectorSpec::burst_size): the burst's number; -1: none.
  int64_t burst = -1;
  std::vector<std::string> marker_ids;  // markers its prompt carries
  std::string prompt;                   // a run of a marker it holds is no leak
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_PROBE_H_
