// Probe prompts. Every prompt is plain text the auditor writes itself; none
// holds customer text. Worded for small story models (stories260K, which
// repeats a noun it has just read but not a run of random words) and just
// as usable on larger models. docs/canaries.md has the measured behaviour.
#ifndef KVCANARY_CANARIES_TEMPLATES_H_
#define KVCANARY_CANARIES_TEMPLATES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "canaries/marker.h"

namespace kvcanary::canaries {

// Number of distinct SniffPrompt / GoldenPrompt texts; variants wrap around.
inline constexpr int kSniffPromptVariants = 8;
inline constexpr int kGoldenPromptVariants = 8;

// A story prompt dense with the markers, meant to fill many KV pages: one
// paragraph per marker, in order, each holding the marker's text verbatim
// once; about 104 tok512 tokens per marker (at most 149), so 3 markers
// always fit stories260K's 512-token context. The marker's first word is
// the story's character, the frame in which a small model repeats a word.
// REQUIRES: markers non-empty (CHECKed).
std::string PlantPrompt(const std::vector<Marker>& markers);

// The same markers in as few words as possible, one sentence each ("The
// song: <marker>."), for targets whose input limit is too small for even
// one paragraph of PlantPrompt: more, shorter plants rather than none.
// REQUIRES: markers non-empty (CHECKed).
std::string CompactPlantPrompt(const std::vector<Marker>& markers);

// Prompts that invite continuation or repetition, e.g. "Then the"; a leak
// puts foreign KV in the context they continue. variant % kSniffPromptVariants
// picks the text.
std::string SniffPrompt(uint64_t variant);

// A story whose character is the nonce's first word and which quotes the
// nonce's text twice, ending where a model that read it names the character
// again: greedy stories260K writes the first nonce word for 79% of nonces,
// while an unrelated prompt's output holds it 0.6% of the time
// (docs/canaries.md). REQUIRES: nonce.words non-empty (CHECKed).
std::string EchoPrompt(const Marker& nonce);

// Fixed prompts whose greedy answer is recorded alone first and compared
// under load. variant % kGoldenPromptVariants picks the text.
std::string GoldenPrompt(uint64_t variant);

}  // namespace kvcanary::canaries

#endif  // KVCANARY_CANARIES_TEMPLATES_H_
