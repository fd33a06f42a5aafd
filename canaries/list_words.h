// The words of a text as the scanner sees them, and which of them are
// marker list words (canaries/marker.h), found in one pass.
//
// A word is a maximal run of ASCII letters, A-Z and a-z. Every other byte
// separates words: space, punctuation, digit, underscore, control, NUL and
// every byte >= 0x80, so each byte of a non-ASCII UTF-8 character ("é",
// "—", a full-width "Ａ") is a separator too. A word's normalised form is
// its ASCII lower case. A list word is a word whose normalised form is in
// MarkerWordList(); "Cake" and "CAKE" are "cake", "cakes" and "ca" are no
// list word. Two list words are consecutive when no other word lies
// between them, whatever the separators between them are.
// docs/canaries.md, "Words and normalisation".
#ifndef KVCANARY_CANARIES_LIST_WORDS_H_
#define KVCANARY_CANARIES_LIST_WORDS_H_

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvcanary::canaries {

// A list word in a text.
struct ListWord {
  size_t start = 0;  // byte offset of its first letter
  size_t end = 0;    // byte offset just past its last letter
  int index = 0;     // in MarkerWordList()
};

// Calls `on_run` with every maximal run of consecutive list words that is
// at least `min_words` long, in text order. The span is valid during the
// call only. One pass over the text; no allocation unless a run is longer
// than a few dozen words. Thread-safe.
void ForEachListWordRun(
    absl::string_view text, int min_words,
    absl::FunctionRef<void(absl::Span<const ListWord>)> on_run);

// Index in MarkerWordList() of the word `word` (ASCII letters, any case),
// or -1: through the same table as ForEachListWordRun.
int ListWordIndexIgnoringCase(absl::string_view word);

namespace internal {
// Bit i set iff p[i] is an ASCII letter, for the 64 bytes at `p`: with
// SSE2 where the build has it. LetterMaskPortable is the byte-by-byte
// oracle of the test.
uint64_t LetterMask(const char* p);
uint64_t LetterMaskPortable(const char* p);
}  // namespace internal

}  // namespace kvcanary::canaries

#endif  // KVCANARY_CANARIES_LIST_WORDS_H_
