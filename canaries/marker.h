// Canary markers rendered as text: a run of real words chosen by secret
// bits. The auditor plants a marker in one tenant's prompt and looks for it
// in every other tenant's output (canaries/scanner.h).
//
// Why words and not a random string: a small model copies only the first
// piece of a made-up word (given "Zorblax" in context, stories260K writes
// "Zara"), but it does repeat words it knows. So a marker is kMarkerWords
// words from a fixed list of 256 concrete nouns the model produces and
// repeats (docs/canaries.md: the list's origin and the measured copy rate).
//
// Rendering (format v1; changing it changes every marker text, so bump the
// seed labels in marker_key.h / kNonceSeedLabel with it):
//   id    = "m" + hex(seed[0..8))            (nonce: "n" + hex(seed[0..8)))
//   words = seed[8 + i] for i in [0, kMarkerWords)   (nonce: kNonceWords)
//   text  = the words joined by single spaces
// The words come from bytes the id does not contain, so a logged id says
// nothing about the marker text. One byte indexes the 256-word list exactly,
// so every word is uniform and independent: a marker holds
// kMarkerWords * 8 = 128 bits, a nonce kNonceWords * 8 = 32 bits. 8 + 16
// bytes fit in the 32-byte seed, so no seed extension is needed.
#ifndef KVCANARY_CANARIES_MARKER_H_
#define KVCANARY_CANARIES_MARKER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "canaries/marker_key.h"

namespace kvcanary::canaries {

// log2 of MarkerWordList().size(): each word carries this many seed bits.
inline constexpr int kMarkerWordBits = 8;
inline constexpr int kWordListSize = 1 << kMarkerWordBits;
// Words per marker: kMarkerWords * kMarkerWordBits = 128 bits.
inline constexpr int kMarkerWords = 16;
// Words per echo nonce: 32 bits, enough to tell this probe's nonce from any
// other's; a nonce is never evidence of a leak, only of processing.
inline constexpr int kNonceWords = 4;
// The seed bytes before the words: they form the id.
inline constexpr int kMarkerIdBytes = 8;
static_assert(kMarkerWords * kMarkerWordBits >= 128);
static_assert(kMarkerIdBytes + kMarkerWords <= kHmacSha256Bytes);

// Domain-separation label for nonce seeds: the message is
// EncodeMarkerSeedMessage(tenant, campaign, counter) with its leading
// kMarkerSeedLabel replaced by this label, so a nonce never equals the
// marker of the same (tenant, campaign, counter).
inline constexpr absl::string_view kNonceSeedLabel = "kvcanary/nonce-seed/v1";

// The fixed word list: kWordListSize distinct lower-case ASCII words,
// sorted; the index of a word is its value. Never reorder or edit it: that
// changes every marker (bump the seed labels instead).
const std::vector<std::string>& MarkerWordList();

// Index of `word` (lower-case) in MarkerWordList(), or -1.
int MarkerWordIndex(absl::string_view word);

struct Marker {
  // "m" + 16 lower-case hex chars: the first kMarkerIdBytes of the seed
  // ("n" + 16 for a nonce). Safe to log and store: it reveals no word.
  std::string id;
  // Indices into MarkerWordList(); kMarkerWords of them (kNonceWords for a
  // nonce).
  std::vector<int> words;
  // The words joined by single spaces.
  std::string text;
};

// Deterministic; uses seed bytes [0, 8) for the id and [8, 8 + kMarkerWords)
// for the words.
Marker RenderMarker(const MarkerSeed& seed);

// = RenderMarker(DeriveMarkerSeed(secret_key, tenant, campaign, counter)).
Marker DeriveMarker(absl::string_view secret_key, absl::string_view tenant,
                    absl::string_view campaign, uint64_t counter);

// A short nonce for echo probes: kNonceWords words, id "n" + 16 hex chars,
// derived as a marker is but under kNonceSeedLabel.
Marker DeriveNonce(absl::string_view secret_key, absl::string_view tenant,
                   absl::string_view campaign, uint64_t counter);

// The text of a word sequence: list words joined by single spaces.
// REQUIRES: every index in [0, kWordListSize) (CHECKed).
std::string MarkerText(const std::vector<int>& words);

}  // namespace kvcanary::canaries

#endif  // KVCANARY_CANARIES_MARKER_H_
