// The acceptance sweep's plan (`kvcanary-auditor accept`, docs/accept.md):
// which prompt lengths it sweeps — every page boundary ±1, the powers of
// two, the limit itself, and lengths past it — and the prompt of each kind
// built to one of those lengths from measured filler. The auditor has no
// tokenizer: a prompt's length is predicted from counts the target
// reported (base + units × unit_tokens + pads), never computed.
// Pure functions; thread-compatible.
#ifndef KVCANARY_AUDITOR_AUDITS_ACCEPT_PLAN_H_
#define KVCANARY_AUDITOR_AUDITS_ACCEPT_PLAN_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "auditor/target/prompts.h"  // PadCandidates
#include "canaries/marker.h"

namespace kvcanary::auditor {

// The prompts the sweep sends. Every one starts with a unique
// `<digits> Ticket.` prefix and "Once upon a time." (BoundaryPrompt's
// head), then filler units, then pads, then what the kind adds:
//   count   nothing (BoundaryPrompt itself, padded)
//   start   the echo block before the filler, the ask after it
//   middle  the echo block between two halves of the filler, the ask last
//   end     the echo block after the filler, the ask last
//   golden  a fixed greedy question after the filler
enum class PromptKind { kCount, kEchoStart, kEchoMiddle, kEchoEnd, kGolden };
inline constexpr PromptKind kAllPromptKinds[] = {
    PromptKind::kCount, PromptKind::kEchoStart, PromptKind::kEchoMiddle,
    PromptKind::kEchoEnd, PromptKind::kGolden};
inline constexpr PromptKind kEchoPositions[] = {
    PromptKind::kEchoStart, PromptKind::kEchoMiddle, PromptKind::kEchoEnd};
// count, start, middle, end, golden.
const char* PromptKindName(PromptKind kind);
bool IsEcho(PromptKind kind);

// How prompt tokens follow from the filler, per kind: base + units ×
// unit_tokens + pads (a pad is one token, where a one-token pad word was
// found by measurement), within ± tolerance (how much a unique prefix's
// count varies on this target).
struct FillerModel {
  int unit_tokens = 0;
  int tolerance = 0;
  std::string pad;  // e.g. " a"; empty: no one-token pad word found
  std::map<PromptKind, int> base;  // kinds measured; others unusable
};

// The filler of one prompt and the prompt tokens it predicts.
struct Fill {
  int units = 0;
  int pads = 0;
  int predicted = 0;
};

// The fill of `kind` that reaches `target` tokens: exactly with pads;
// without, the nearest below (at_least: at or above, so a prompt meant to
// be past a limit stays past it). nullopt if the kind is not measured or
// its shortest prompt is longer than `target`.
std::optional<Fill> FillFor(const FillerModel& model, PromptKind kind,
                            int target, bool at_least = false);

// The prompt of `kind` with `fill`, after `prefix` (a CacheBuster prefix).
// REQUIRES: nonce for the echo kinds (CHECKed).
std::string BuildAcceptPrompt(PromptKind kind, const std::string& prefix,
                              const Fill& fill, const std::string& pad,
                              const canaries::Marker* nonce);

// The echo prompt alone, without filler: the short form calibration tries
// nonces with (the end kind at zero units; canaries::EchoPrompt's text).
std::string ShortEchoPrompt(const std::string& prefix,
                            const canaries::Marker& nonce);

// True if no word of `nonce` occurs in the sweep's own text (filler, pads,
// questions, the echo block around the nonce): only such a nonce proves,
// by coming back, that its part of the prompt was read.
bool NonceStandsOut(const canaries::Marker& nonce);

// One length the sweep covers and why.
struct SweepLength {
  int tokens = 0;
  bool past = false;             // past the limit: must be refused
  std::vector<std::string> why;  // page_boundary, power_of_two, limit, ...
};

// Within [shortest, within_max]: every k × page_tokens − 1, k ×
// page_tokens and k × page_tokens + 1, the powers of two, and within_max
// (the limit itself). Past it (refuse_above > 0): refuse_above + 1,
// refuse_above + page_tokens and 2 × refuse_above (at most refuse_above +
// max_past_extra). Sorted, each length once with all its reasons.
std::vector<SweepLength> PlanLengths(int page_tokens, int shortest,
                                     int within_max, int refuse_above,
                                     int max_past_extra);

// "15..17, 31..33, 47": consecutive lengths joined into ranges.
std::string RangesText(const std::vector<int>& sorted_lengths);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_AUDITS_ACCEPT_PLAN_H_
