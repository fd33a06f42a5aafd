// Prompts whose length the auditor predicts from the target's own counts
// (it has no tokenizer): a cache-busting prefix unique per request, and
// filler made of one repeated unit of plain words, which tokenizers count
// the same way every time it is repeated.
#ifndef KVCANARY_AUDITOR_TARGET_PROMPTS_H_
#define KVCANARY_AUDITOR_TARGET_PROMPTS_H_

#include <random>
#include <string>

namespace kvcanary::auditor {

// A unique prefix per call ("Ticket 8306422791."): ten random digits.
// Tokenizers that split digits (SentencePiece models, Llama 3's groups of
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

// The boundary prompts' unit of text: plain words, so tokenizers count it
// the same way every time it is repeated. `prefix` comes first.
std::string BoundaryPrompt(const std::string& prefix, int units);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_PROMPTS_H_
