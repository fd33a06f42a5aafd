#include "canaries/list_words.h"

#include <cstring>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/numeric/bits.h"
#include "canaries/marker.h"
#include "common/check.h"

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace kvcanary::canaries {
namespace {

// Bytes of text one LetterMask covers.
constexpr size_t kBlockBytes = 64;
// Each byte | 0x20: an ASCII letter's lower case.
constexpr uint64_t kLowerCase = 0x2020202020202020;
// The longest word a key holds; longer words are never list words.
constexpr size_t kMaxKeyLetters = 16;

bool IsAsciiLetter(unsigned char c) {
  return static_cast<unsigned char>((c | 0x20) - 'a') < 26;
}

// The 8 bytes at p as a little-endian number: byte 0 is the lowest.
uint64_t Load64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

// Letters p[0, n) of a word (n <= 8) lower-cased, the rest of the 8 bytes
// zero; `readable` bytes from p may be read (>= n).
uint64_t Fold(const char* p, size_t n, size_t readable) {
  uint64_t v;
  if (readable >= 8) {
    v = Load64(p);
  } else {
    char bytes[8] = {};
    std::memcpy(bytes, p, readable);
    v = Load64(bytes);
  }
  v |= kLowerCase;
  return n >= 8 ? v : v & ((uint64_t{1} << (8 * n)) - 1);
}

// A word's lower-cased letters 0..7 (lo) and 8..15 (hi), zero padded. A
// word of more than kMaxKeyLetters letters gets lo = 0, which no word has.
struct WordKey {
  uint64_t lo = 0;
  uint64_t hi = 0;
  bool operator==(const WordKey& o) const { return lo == o.lo && hi == o.hi; }
};

// REQUIRES: p[0, len) are ASCII letters, len >= 1, readable >= len.
WordKey KeyOf(const char* p, size_t len, size_t readable) {
  WordKey key;
  key.lo = Fold(p, len < 8 ? len : 8, readable);
  if (len > 8) {
    if (len > kMaxKeyLetters) return WordKey{};
    key.hi = Fold(p + 8, len - 8, readable - 8);
  }
  return key;
}

// The list words' keys in a collision-free multiplicative hash: one
// multiply, one slot, one key compared per word of text. 8 KB of slots and
// 4 KB of keys stay in L1.
class ListWordTable {
 public:
  ListWordTable() {
    const std::vector<std::string>& list = MarkerWordList();
    for (int i = 0; i < kWordListSize; ++i) {
      CHECK(list[i].size() <= kMaxKeyLetters) << list[i];
      keys_[i] = KeyOf(list[i].data(), list[i].size(), list[i].size());
    }
    keys_[kWordListSize] = WordKey{~uint64_t{0}, ~uint64_t{0}};  // no word's
    // Odd multipliers from SplitMix64 until one puts every key in its own
    // slot: about one in 3,000 does; deterministic, well under 1 ms.
    uint64_t state = 0x5eed;
    for (int tries = 0; tries < 1000000; ++tries) {
      state += 0x9e3779b97f4a7c15;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
      z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
      multiplier_ = (z ^ (z >> 31)) | 1;
      if (Place()) return;
    }
    CHECK(false) << "no collision-free multiplier for the word list";
  }

  // Index of the word with `key`, or -1.
  int Find(const WordKey& key) const {
    const int i = slots_[Slot(key)];
    return keys_[i] == key ? i : -1;
  }

 private:
  static constexpr int kSlotBits = 12;

  size_t Slot(const WordKey& key) const {
    // hi is 0 but for words of 9 letters or more; the search for a
    // multiplier checks the list's keys, any other word is compared.
    return static_cast<size_t>(((key.lo ^ key.hi) * multiplier_) >>
                               (64 - kSlotBits));
  }
  // Whether every key gets its own slot under multiplier_; fills slots_.
  bool Place() {
    for (uint16_t& s : slots_) s = kWordListSize;
    for (int i = 0; i < kWordListSize; ++i) {
      uint16_t& s = slots_[Slot(keys_[i])];
      if (s != kWordListSize) return false;
      s = static_cast<uint16_t>(i);
    }
    return true;
  }

  uint64_t multiplier_ = 1;
  uint16_t slots_[1 << kSlotBits];  // a key's index, or kWordListSize
  WordKey keys_[kWordListSize + 1];
};

const ListWordTable& Table() {
  static const ListWordTable* const kTable = new ListWordTable();
  return *kTable;
}

// Gathers list words into runs of consecutive ones and hands each run of
// at least min_words to on_run.
class RunCollector {
 public:
  RunCollector(int min_words,
               absl::FunctionRef<void(absl::Span<const ListWord>)> on_run)
      : min_words_(min_words), on_run_(on_run) {}
  // A list word that is word number `ordinal` of the text.
  void Add(uint64_t ordinal, size_t start, size_t end, int index) {
    if (ordinal != next_ordinal_) Flush();
    run_.push_back(ListWord{start, end, index});
    next_ordinal_ = ordinal + 1;
  }
  void Flush() {
    if (static_cast<int>(run_.size()) >= min_words_) on_run_(run_);
    run_.clear();
  }

 private:
  const int min_words_;
  absl::FunctionRef<void(absl::Span<const ListWord>)> on_run_;
  absl::InlinedVector<ListWord, 32> run_;
  uint64_t next_ordinal_ = 0;
};

// Finds the words of a text 64 bytes at a time: a letter mask per block,
// word starts and ends as its bit edges, each word looked up once.
class WordSplitter {
 public:
  WordSplitter(absl::string_view text, RunCollector* runs)
      : data_(text.data()), size_(text.size()), table_(Table()), runs_(runs) {}

  void Split() {
    size_t base = 0;
    for (; base + kBlockBytes <= size_; base += kBlockBytes) {
      Block(internal::LetterMask(data_ + base), base);
    }
    if (base < size_) {  // the tail, zero padded: NUL separates words
      char tail[kBlockBytes] = {};
      std::memcpy(tail, data_ + base, size_ - base);
      Block(internal::LetterMask(tail), base);
    }
    if (open_) Word(open_start_, size_);
  }

 private:
  // The words that end in the block at `base` (bit i of `letters`: byte
  // base + i is a letter); a word still going at its end stays open.
  void Block(uint64_t letters, size_t base) {
    const uint64_t after_letter = (letters << 1) | carry_;
    carry_ = letters >> 63;
    uint64_t starts = letters & ~after_letter;
    uint64_t ends = ~letters & after_letter;  // first byte past a word
    if (open_) {
      if (ends == 0) return;  // all letters: the word goes on
      Word(open_start_, base + absl::countr_zero(ends));
      ends &= ends - 1;
      open_ = false;
    }
    while (starts != 0) {
      const size_t start = base + absl::countr_zero(starts);
      starts &= starts - 1;
      if (ends == 0) {
        open_ = true;
        open_start_ = start;
        return;
      }
      Word(start, base + absl::countr_zero(ends));
      ends &= ends - 1;
    }
  }
  void Word(size_t start, size_t end) {
    ++ordinal_;
    const int index =
        table_.Find(KeyOf(data_ + start, end - start, size_ - start));
    if (index >= 0) runs_->Add(ordinal_, start, end, index);
  }

  const char* const data_;
  const size_t size_;
  const ListWordTable& table_;
  RunCollector* const runs_;
  uint64_t carry_ = 0;  // the last byte of the previous block is a letter
  bool open_ = false;   // a word runs past the previous block
  size_t open_start_ = 0;
  uint64_t ordinal_ = 0;  // words seen
};

}  // namespace

void ForEachListWordRun(
    absl::string_view text, int min_words,
    absl::FunctionRef<void(absl::Span<const ListWord>)> on_run) {
  RunCollector runs(min_words < 1 ? 1 : min_words, on_run);
  WordSplitter(text, &runs).Split();
  runs.Flush();
}

int ListWordIndexIgnoringCase(absl::string_view word) {
  if (word.empty()) return -1;
  for (char c : word) {
    if (!IsAsciiLetter(static_cast<unsigned char>(c))) return -1;
  }
  return Table().Find(KeyOf(word.data(), word.size(), word.size()));
}

namespace internal {

uint64_t LetterMaskPortable(const char* p) {
  uint64_t mask = 0;
  for (size_t i = 0; i < kBlockBytes; ++i) {
    if (IsAsciiLetter(static_cast<unsigned char>(p[i]))) {
      mask |= uint64_t{1} << i;
    }
  }
  return mask;
}

// A byte is a letter iff (byte | 0x20) - 'a', unsigned, is at most 25.
#if defined(__AVX2__)
uint64_t LetterMask(const char* p) {
  const __m256i lower = _mm256_set1_epi8(0x20);
  const __m256i a = _mm256_set1_epi8('a');
  const __m256i z = _mm256_set1_epi8(25);
  uint64_t mask = 0;
  for (int half = 0; half < 2; ++half) {
    const __m256i v =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * half));
    const __m256i t = _mm256_sub_epi8(_mm256_or_si256(v, lower), a);
    const __m256i letter = _mm256_cmpeq_epi8(_mm256_min_epu8(t, z), t);
    mask |= uint64_t{static_cast<uint32_t>(_mm256_movemask_epi8(letter))}
            << (32 * half);
  }
  return mask;
}
#elif defined(__SSE2__)
uint64_t LetterMask(const char* p) {
  const __m128i lower = _mm_set1_epi8(0x20);
  const __m128i a = _mm_set1_epi8('a');
  const __m128i z = _mm_set1_epi8(25);
  uint64_t mask = 0;
  for (int quarter = 0; quarter < 4; ++quarter) {
    const __m128i v =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * quarter));
    const __m128i t = _mm_sub_epi8(_mm_or_si128(v, lower), a);
    const __m128i letter = _mm_cmpeq_epi8(_mm_min_epu8(t, z), t);
    mask |= uint64_t{static_cast<uint32_t>(_mm_movemask_epi8(letter))}
            << (16 * quarter);
  }
  return mask;
}
#else
uint64_t LetterMask(const char* p) { return LetterMaskPortable(p); }
#endif

}  // namespace internal
}  // namespace kvcanary::canaries
