// Prompts whose length the auditor predicts from the target's own counts
// (it has no tokenizer): a cache-busting prefix unique per request, and
// filler made of one repeated unit of plain words, which tokenizers count
// the same way every time it is repeated.
#ifndef KVCANARY_AUDITOR_TARGET_PROMPTS_H_
#define KVCANARY_AUDITOR_TARGET_PROMPTS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kvcanary::auditor {

// A unique prefix per call ("8306422791 Ticket."): ten random digits, first,
// so that no constant word sits between the tokens every request shares (a
// BOS, a chat template's header: Target::shared_head_tokens()) and the
// unique part — a server that reuses its slot's previous prompt (llama.cpp)
// would report such a word as cached on every request. Tokenizers that
// split digits (SentencePiece models, Llama 3's groups of
// three) count it the same way each time; BPEs that merge digit runs (GPT-2,
// GPT-NeoX) vary by a token or two, which the calibration measures as its
// tolerance.
class CacheBuster {
 public:
  CacheBuster();
  std::string Next();

 private:
  std::mt19937_64 rng_;
};

// A prefix for probing a prompt cache that no other prompt shares a block
// with: the buster's next unique head first, then `letters` random single
// letters (drawn with `random`), about a token or two each on any
// tokenizer. cache-audit's primes and the cache_refusal detector's.
std::string CacheProbePrefix(CacheBuster* buster, int letters,
                             const std::function<uint64_t()>& random);

// The boundary prompts' unit of text: plain words, so tokenizers count it
// the same way every time it is repeated. `prefix` comes first.
std::string BoundaryPrompt(const std::string& prefix, int units);

// Count prompts: BoundaryPrompt(prefix, units), then `pads` copies of a
// one-token pad word where one was found, so that every length can be hit:
// base + units × unit_tokens + pads prompt tokens.
struct CountFill {
  int units = 0;
  int pads = 0;
  int predicted = 0;
};
// The fill of `tokens`: exactly with a pad, else the nearest below
// (at_least: at or above). nullopt below `base` or without a unit.
std::optional<CountFill> CountFillFor(int base, int unit_tokens,
                                      const std::string& pad, int tokens,
                                      bool at_least = false);
std::string CountPrompt(const std::string& prefix, const CountFill& fill,
                        const std::string& pad);

// Words that may count one token wherever they follow the filler, in the
// order tried: " a", " the", ...
const std::vector<std::string>& PadCandidates();

// Whether `pad` counts one token after two units of filler, however many
// follow (1 and unit_tokens - 1 of them), after `prefix`. `count(prompt)`
// sends a prompt alone and returns its usage.prompt_tokens (-1: none).
bool CountPadWorks(const std::string& pad, int unit_tokens,
                   const std::string& prefix,
                   const std::function<int(const std::string&)>& count);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_PROMPTS_H_
