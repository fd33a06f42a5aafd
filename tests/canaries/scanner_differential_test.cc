// MarkerScanner against ReferenceMarkerScanner, the RE2 scanner it
// replaced: the same registry, the same text, the same hit lists (ids,
// owners, lengths, exact flags, offsets and every run) on random text,
// marker-dense text and adversarial text. Fixed seeds; a few seconds.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "canaries/marker.h"
#include "canaries/reference_scanner.h"
#include "canaries/scanner.h"
#include "gtest/gtest.h"

namespace kvcanary::canaries {
namespace {

constexpr absl::string_view kKey = "differential-test-key-0123456789";

// A hit list as one line per hit, every field and run included.
std::string Describe(const std::vector<MarkerHit>& hits) {
  std::string out;
  for (const MarkerHit& h : hits) {
    absl::StrAppend(&out, "[", h.marker_id, " owner=", h.owner,
                    " words=", h.words_matched, " exact=", h.exact,
                    " offset=", h.offset, " runs=");
    for (const MarkerRun& r : h.runs) {
      absl::StrAppend(&out, "(", r.marker_word, ",", r.words, ",", r.offset,
                      "-", r.end, ")");
    }
    absl::StrAppend(&out, "]\n");
  }
  return out;
}

// The text as a C string literal's body, at most 600 bytes of it.
std::string Shown(absl::string_view text) {
  return absl::CEscape(text.substr(0, 600)) + (text.size() > 600 ? "..." : "");
}

// Both scanners over the same markers.
class Pair {
 public:
  explicit Pair(int min_partial_words)
      : fast_(min_partial_words), reference_(min_partial_words) {}
  void Add(const Marker& marker, absl::string_view owner) {
    fast_.Add(marker, owner);
    reference_.Add(marker, owner);
    markers_.push_back(marker);
  }
  void Compile() {
    ASSERT_TRUE(fast_.Compile().ok());
    ASSERT_TRUE(reference_.Compile().ok());
  }
  // Returns the number of hits, so callers can check the text was
  // interesting.
  size_t ExpectSame(absl::string_view text) const {
    const std::vector<MarkerHit> want = reference_.Scan(text);
    EXPECT_EQ(Describe(fast_.Scan(text)), Describe(want))
        << "text: \"" << Shown(text) << "\"";
    return want.size();
  }
  const std::vector<Marker>& markers() const { return markers_; }

 private:
  MarkerScanner fast_;
  ReferenceMarkerScanner reference_;
  std::vector<Marker> markers_;
};

Marker FromWords(absl::string_view id, std::vector<int> words) {
  Marker m;
  m.id = std::string(id);
  m.words = std::move(words);
  m.text = MarkerText(m.words);
  return m;
}

// Separators, the edges of the ASCII letter ranges and non-ASCII bytes
// among them.
const std::vector<std::string>& Separators() {
  static const auto* kSeparators = new std::vector<std::string>{
      " ",
      " ",
      " ",
      "  ",
      ", ",
      ". ",
      "\n",
      "\n\n",
      "\t",
      "-",
      "'",
      "\"",
      "1",
      "42",
      "_",
      "@",
      "[",
      "`",
      "{",
      "/",
      "\xc3\xa9",
      "\xe2\x80\x94",
      "\xff",
      "\x80",
      "\xc1",
      "\xda",
      std::string(1, '\0'),
      "...\" ",
      "\xef\xbc\xa1"};  // U+FF21, a full-width A: not an ASCII letter
  return *kSeparators;
}

// A word that is not a list word but looks like one: a prefix or an
// extension of a list word, or a common story word.
std::string NearMiss(std::mt19937_64& rng) {
  static const char* kStory[] = {"a",    "the",  "once", "upon",  "time",
                                 "lily", "girl", "was",  "happy", "they"};
  const std::string& w = MarkerWordList()[rng() % kWordListSize];
  switch (rng() % 5) {
    case 0:
      return w.substr(0, 1 + rng() % (w.size() - 1));  // "ca" of "cake"
    case 1:
      return w + "s";
    case 2:
      return w + std::string(1 + rng() % 10, 'x');  // long words too
    case 3:
      return std::string(15 + rng() % 4, 'q');  // 15..18 letters
    default:
      return kStory[rng() % 10];
  }
}

// Letters of `word` in random case.
std::string MangleCase(std::string word, std::mt19937_64& rng) {
  for (char& c : word) {
    if (rng() % 3 == 0) c = absl::ascii_toupper(static_cast<unsigned char>(c));
  }
  return word;
}

// Random text of about `bytes` bytes: list words, near misses, slices of
// the registered markers, joined by random separators.
std::string RandomText(const std::vector<Marker>& markers, size_t bytes,
                       int list_percent, std::mt19937_64& rng) {
  std::string text;
  if (rng() % 2) text = Separators()[rng() % Separators().size()];
  while (text.size() < bytes) {
    std::string piece;
    const int roll = static_cast<int>(rng() % 100);
    if (!markers.empty() && roll < list_percent / 3) {
      const Marker& m = markers[rng() % markers.size()];
      const size_t first = rng() % m.words.size();
      const size_t count = 1 + rng() % (m.words.size() - first);
      for (size_t i = first; i < first + count; ++i) {
        if (i > first) piece += Separators()[rng() % Separators().size()];
        piece += MarkerWordList()[m.words[i]];
      }
    } else if (roll < list_percent) {
      piece = MarkerWordList()[rng() % kWordListSize];
    } else {
      piece = NearMiss(rng);
    }
    text += MangleCase(piece, rng);
    if (rng() % 8) text += Separators()[rng() % Separators().size()];
  }
  return text;
}

TEST(ScannerDifferentialTest, RandomTextAgainstThousandsOfMarkers) {
  std::mt19937_64 rng(1);
  Pair pair(kDefaultMinPartialWords);
  for (uint64_t c = 0; c < 3000; ++c) {
    pair.Add(DeriveMarker(kKey, absl::StrCat("t", c % 5), "c", c),
             absl::StrCat("t", c % 5));
  }
  for (uint64_t c = 0; c < 50; ++c) {
    pair.Add(DeriveNonce(kKey, absl::StrCat("t", c % 5), "c", c),
             absl::StrCat("t", c % 5));
  }
  pair.Compile();
  size_t hits = 0;
  for (int t = 0; t < 300; ++t) {
    const size_t bytes = rng() % 3000;
    hits += pair.ExpectSame(
        RandomText(pair.markers(), bytes, static_cast<int>(rng() % 100), rng));
  }
  EXPECT_GT(hits, 300u);
}

// Markers over six list words only: every text is dense with partial,
// overlapping and repeated runs of many markers at once.
TEST(ScannerDifferentialTest, MarkerDenseTextEveryMinPartialWords) {
  const std::vector<int> vocabulary = {3, 40, 41, 99, 200, 255};
  for (int min_partial : {1, 2, 3, 4, 5, 8, 9, 16}) {
    std::mt19937_64 rng(100 + min_partial);
    Pair pair(min_partial);
    for (int i = 0; i < 150; ++i) {
      // Lengths 1..20: shorter and longer than a window and than a marker.
      std::vector<int> words(1 + rng() % 20);
      for (int& w : words) w = vocabulary[rng() % vocabulary.size()];
      pair.Add(FromWords(absl::StrCat("d", i), words),
               absl::StrCat("o", i % 3));
    }
    pair.Compile();
    std::vector<Marker> dense;
    for (int w : vocabulary) dense.push_back(FromWords("v", {w}));
    size_t hits = 0;
    for (int t = 0; t < 60; ++t) {
      hits += pair.ExpectSame(RandomText(dense, rng() % 1500, 90, rng));
    }
    EXPECT_GT(hits, 60u) << min_partial;
  }
}

// Registered markers that overlap: b starts with a's last five words, c
// shares a 3-word window with a, d repeats one word, e is a's prefix.
Pair* OverlappingPair() {
  const Marker a = DeriveMarker(kKey, "ta", "c", 1);
  Marker b = DeriveMarker(kKey, "tb", "c", 1);
  std::copy(a.words.end() - 5, a.words.end(), b.words.begin());
  Marker c = DeriveMarker(kKey, "tc", "c", 1);
  std::copy(a.words.begin() + 6, a.words.begin() + 9, c.words.begin() + 10);
  const Marker d = FromWords("md-repeated", std::vector<int>(16, 40));
  const Marker e = FromWords(
      "me-prefix", std::vector<int>(a.words.begin(), a.words.begin() + 4));
  auto* pair = new Pair(kDefaultMinPartialWords);
  pair->Add(a, "ta");
  pair->Add(FromWords("mb", b.words), "tb");
  pair->Add(FromWords("mc", c.words), "tc");
  pair->Add(d, "td");
  pair->Add(e, "te");
  pair->Add(DeriveNonce(kKey, "tn", "c", 1), "tn");
  pair->Compile();
  return pair;
}

// Words [first, first + count) of `m` joined by `separator`.
std::string Slice(const Marker& m, int first, int count,
                  absl::string_view separator = " ") {
  std::vector<std::string> words;
  for (int i = first; i < first + count && i < static_cast<int>(m.words.size());
       ++i) {
    words.push_back(MarkerWordList()[m.words[i]]);
  }
  return absl::StrJoin(words, separator);
}

std::vector<std::string> AdversarialTexts(const std::vector<Marker>& m) {
  const Marker& a = m[0];
  const Marker unknown = DeriveMarker("another auditor", "x", "y", 9);
  std::vector<std::string> texts = {
      "",
      " ",
      std::string(1, '\0'),
      "cake",
      "CAKE",
      "cakes cake",
      a.text,
      absl::AsciiStrToUpper(a.text),
      Slice(a, 0, 16, ","),
      Slice(a, 0, 16, "...\n"),
      Slice(a, 0, 16, "1"),
      Slice(a, 0, 16, "_"),
      Slice(a, 0, 16, "\xc3\xa9"),
      Slice(a, 0, 16, std::string(1, '\0')),
      Slice(a, 0, 16, ""),  // one long word: no list word at all
      absl::StrCat(Slice(a, 0, 11), " ", m[1].text),  // a overlaps b
      absl::StrCat(a.text, " ", m[1].text, " ", m[2].text),
      absl::StrCat(Slice(a, 0, 8), " the ", Slice(a, 8, 8)),
      absl::StrCat(Slice(a, 0, 8), "s ", Slice(a, 8, 8)),  // a suffix breaks
      absl::StrCat(Slice(a, 0, 7), " ", Slice(a, 6, 10)),  // a word repeated
      absl::StrCat(m[3].text, " ", m[3].text, " ", Slice(m[3], 0, 5)),
      std::string(400, 'q'),
      unknown.text,
      absl::StrCat(a.text, " ", unknown.text, " ", Slice(m[1], 3, 9)),
      absl::StrCat(Slice(unknown, 0, 4), " ", Slice(a, 0, 3), " ",
                   Slice(unknown, 4, 12)),
      absl::StrCat(m[5].text, ". ", m[5].text, " ", m[5].text, "!"),
      // Two unexplained stretches of the same length: the first is reported.
      absl::StrCat(Slice(unknown, 0, 8), " the ", Slice(unknown, 8, 8)),
      "butterfly butterflyx butterfl BUTTERFLY Butterfly",
      "ca cak cake caket a an ant ants zo zoo zook",
  };
  // The same words, case flipped letter by letter.
  std::string flipped = a.text;
  for (size_t i = 0; i < flipped.size(); i += 2) {
    flipped[i] = absl::ascii_toupper(static_cast<unsigned char>(flipped[i]));
  }
  texts.push_back(flipped);
  return texts;
}

TEST(ScannerDifferentialTest, AdversarialTextAtEveryAlignment) {
  std::unique_ptr<Pair> pair(OverlappingPair());
  size_t hits = 0;
  for (const std::string& text : AdversarialTexts(pair->markers())) {
    // Shifted across 64-byte boundaries, with and without a letter or a
    // separator right before and after.
    for (size_t pad = 0; pad < 70; ++pad) {
      for (const char* edge : {"", " ", "x", "\xc3"}) {
        const std::string shifted = absl::StrCat(
            std::string(pad, pad % 3 == 0 ? '.' : ' '), edge, text, edge);
        hits += pair->ExpectSame(shifted);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  EXPECT_GT(hits, 1000u);
}

TEST(ScannerDifferentialTest, EveryByteValueAsSeparatorAndInsideWords) {
  std::unique_ptr<Pair> pair(OverlappingPair());
  const Marker& a = pair->markers()[0];
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    pair->ExpectSame(Slice(a, 0, 16, byte));
    pair->ExpectSame(
        absl::StrCat(Slice(a, 0, 5), " ", byte, "ake ", Slice(a, 5, 11)));
  }
}

}  // namespace
}  // namespace kvcanary::canaries
