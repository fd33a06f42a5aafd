// Latency plausibility: a first token too fast for the prompt the target
// claims to have read means it did not read it (the 2026 incident's
// one-token placeholder answered with the real prompt_tokens), or read it
// from a cache it should not have (a cache-busted prompt whose busting
// prefix the target cut off).
//
// Never one sample against a calibration made at another time: a busy
// server's first tokens swing with its load all day. Each judged probe (at
// the limit, past it) is paired with a cache-busted control at the limit,
// sent alone and back to back with it in random order, so both see the
// same load; a sign test over the pairs (how many probes came back faster
// than kFasterShare of their control's time) decides, at a stated false-
// alarm probability per campaign (kLatencyAlpha). Pairs are sent one
// request at a time: sent together, a batching engine would prefill both
// in one step and give them the same first-token time whatever each
// prompt cost.
#ifndef KVCANARY_AUDITOR_DETECTORS_LATENCY_H_
#define KVCANARY_AUDITOR_DETECTORS_LATENCY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "auditor/detectors/probe.h"
#include "auditor/result/finding.h"

namespace kvcanary::auditor {

// The probability, per campaign, that the latency detector raises a
// finding on a target that processes every prompt it claims to: split
// evenly between its groups (at the limit, past it).
inline constexpr double kLatencyAlpha = 1e-3;
// A probe counts as faster than its control below this share of the
// control's first-token time: a small margin against small differences
// between the two prompts, kept small because a busy server's noise eats
// into the gap a placeholder prefill leaves (measured: 16 of 18 probes past
// the limit under 0.75 of their controls on a loaded 2-core machine).
inline constexpr double kFasterShare = 0.9;

// One timed pair as the target answered it.
struct TimedPair {
  ProbeKind kind = ProbeKind::kAtLimit;  // the judged probe's
  int tenant = 0;
  int64_t probe = 0;  // the judged probe's id
  double probe_ttft_ms = 0, control_ttft_ms = 0;
  int probe_tokens = 0, control_tokens = 0;  // as the target reported
  int predicted = 0;                         // the judged probe's
  int cached_tokens = -1;  // the judged probe's, as reported (-1: not)
};

// Whether a pair can be judged: both first tokens timed, the probe claims
// at least 90% of the control's prompt tokens (a probe the target says was
// shorter may rightly be faster), and the probe was not both cut by the
// target and served cached tokens: a target that cuts a prompt's head
// cuts its cache-busting prefix with it, and what is left is the tail every
// probe shares, which the same tenant's earlier probes may rightly have
// cached (whether another tenant's did is cache-audit's question, not one
// timing can answer).
bool Comparable(const TimedPair& p);
// Whether the target cut the probe's prompt and served part of what was
// left from its cache.
bool CutThenCached(const TimedPair& p);

// The pairs a group needs, all faster, for the sign test to reject at
// `alpha`: the least n with 2^-n <= alpha.
int PairsToDecide(double alpha);
// The pairs a group is sent at least: with 30, the test rejects at α/2
// from 25 faster on, which a target that reads none of its prompts but
// loses one pair in ten to noise still reaches 93% of the time.
inline constexpr int kPairsPerGroup = 30;

// The sign test over a group's comparable pairs: under the hypothesis
// that the target processed every prompt it claims to, each probe is at
// most as likely as not to be the faster of its pair (the order within a
// pair is random), so P(>= k faster of n) <= P(Binomial(n, 1/2) >= k).
struct SignTest {
  int pairs = 0;   // comparable
  int faster = 0;  // probe under kFasterShare × control
  double p_value = 1;
  double median_ratio = 0;  // probe / control first-token time
};
SignTest TestPairs(const std::vector<TimedPair>& pairs);

// The finding a group's pairs make at `alpha`, if the sign test rejects:
// one row naming the tenants whose probes were faster and what the target
// reported of them (prompts it cut, tokens it served from a cache) as the
// cause. `group`: "at_limit" or "past_limit"; `tenants`: names, indexed as
// TimedPair::tenant.
std::optional<Finding> JudgePairs(const std::vector<TimedPair>& pairs,
                                  const std::string& group,
                                  const std::vector<std::string>& tenants,
                                  double alpha);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_DETECTORS_LATENCY_H_
