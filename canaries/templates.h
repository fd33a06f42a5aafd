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

// How the prompts a model must answer are worded. kStory: a story to
// continue, what a text-completion (or small story) model does with a
// prompt. kInstruct: the same text behind an instruction ("Repeat
// exactly: ..."), what a chat model follows where it answers a story
// instead of continuing it. Calibration picks one per campaign by which
// wording gets a nonce echoed alone (auditor/campaign/calibrate.h).
enum class Wording { kStory, kInstruct };
const char* WordingName(Wording wording);  // "story", "instruct"

// What every kInstruct echo prompt starts with.
inline constexpr char kRepeatExactly[] = "Repeat exactly, and nothing else:";

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
// kInstruct: "Continue the text: " before it.
std::string SniffPrompt(uint64_t variant, Wording wording = Wording::kStory);

// A story whose character is the nonce's first word and which quotes the
// nonce's text twice, ending where a model that read it names the character
// again: greedy stories260K writes the first nonce word for 79% of nonces,
// while an unrelated prompt's output holds it 0.6% of the time
// (docs/canaries.md). kInstruct: kRepeatExactly, then the nonce's text,
// which an instruction-following model repeats.
// REQUIRES: nonce.words non-empty (CHECKed).
std::string EchoPrompt(const Marker& nonce, Wording wording = Wording::kStory);

// Fixed prompts whose greedy answer is recorded alone first and compared
// under load. variant % kGoldenPromptVariants picks the text. kInstruct:
// "Continue this story: " before it.
std::string GoldenPrompt(uint64_t variant, Wording wording = Wording::kStory);

}  // namespace kvcanary::canaries

#endif  // KVCANARY_CANARIES_TEMPLATES_H_
