#include "canaries/list_words.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "canaries/marker.h"
#include "gtest/gtest.h"

namespace kvcanary::canaries {
namespace {

// Every run of at least `min_words` list words: its words as "start-end:index".
std::vector<std::string> Runs(absl::string_view text, int min_words = 1) {
  std::vector<std::string> runs;
  ForEachListWordRun(text, min_words, [&](absl::Span<const ListWord> run) {
    std::string r;
    for (const ListWord& w : run) {
      absl::StrAppend(&r, r.empty() ? "" : " ", w.start, "-", w.end, ":",
                      w.index);
    }
    runs.push_back(r);
  });
  return runs;
}

int Index(absl::string_view word) { return MarkerWordIndex(word); }

TEST(ListWordsTest, EveryListWordInAnyCaseAndNothingElse) {
  for (int i = 0; i < kWordListSize; ++i) {
    const std::string& w = MarkerWordList()[i];
    EXPECT_EQ(ListWordIndexIgnoringCase(w), i) << w;
    EXPECT_EQ(ListWordIndexIgnoringCase(absl::AsciiStrToUpper(w)), i) << w;
    std::string mixed = w;
    mixed[0] = absl::ascii_toupper(static_cast<unsigned char>(mixed[0]));
    EXPECT_EQ(ListWordIndexIgnoringCase(mixed), i) << w;
    EXPECT_EQ(ListWordIndexIgnoringCase(w.substr(0, w.size() - 1)),
              MarkerWordIndex(w.substr(0, w.size() - 1)))
        << w;
    EXPECT_EQ(ListWordIndexIgnoringCase(w + "s"), MarkerWordIndex(w + "s"))
        << w;
    EXPECT_EQ(ListWordIndexIgnoringCase(w + std::string(9, 'a')), -1) << w;
  }
  EXPECT_EQ(ListWordIndexIgnoringCase(""), -1);
  EXPECT_EQ(ListWordIndexIgnoringCase("ca ke"), -1);
  EXPECT_EQ(ListWordIndexIgnoringCase("butterflyy"), -1);
  EXPECT_EQ(ListWordIndexIgnoringCase(std::string(20, 'z')), -1);
}

TEST(ListWordsTest, LetterMaskMatchesTheByteByByteOracle) {
  std::mt19937_64 rng(3);
  char block[64];
  for (int b = 0; b < 256; ++b) {  // every byte value at every position
    for (int at = 0; at < 64; ++at) {
      for (char& c : block) c = 'a';
      block[at] = static_cast<char>(b);
      ASSERT_EQ(internal::LetterMask(block),
                internal::LetterMaskPortable(block))
          << b << " at " << at;
    }
  }
  for (int t = 0; t < 10000; ++t) {
    for (char& c : block) c = static_cast<char>(rng());
    ASSERT_EQ(internal::LetterMask(block), internal::LetterMaskPortable(block));
  }
  const std::string edges = "@AZ[`az{" + std::string(56, ' ');
  EXPECT_EQ(internal::LetterMaskPortable(edges.data()), 0b01100110u);
}

TEST(ListWordsTest, SeparatorsDoNotBreakARunOtherWordsDo) {
  const std::string text = "Cake, DOG!\n\xc3\xa9zoo 42 the ant--bee";
  // cake dog zoo are consecutive; "the" breaks; ant bee are consecutive.
  EXPECT_EQ(
      Runs(text),
      (std::vector<std::string>{
          absl::StrCat("0-4:", Index("cake"), " 6-9:", Index("dog"),
                       " 13-16:", Index("zoo")),
          absl::StrCat("24-27:", Index("ant"), " 29-32:", Index("bee"))}));
  EXPECT_EQ(Runs(text, 3).size(), 1u);
  EXPECT_TRUE(Runs(text, 4).empty());
}

TEST(ListWordsTest, PartsOfWordsAreNotListWords) {
  // "cakes" and "ca" are words but no list words; a digit or a non-ASCII
  // byte splits a word, so "cake1dog" and "cake\xc3\xa9dog" hold two.
  EXPECT_TRUE(Runs("cakes ca doggy xcat").empty());
  EXPECT_EQ(Runs("cake1dog").size(), 1u);
  EXPECT_EQ(Runs("cake1dog")[0],
            absl::StrCat("0-4:", Index("cake"), " 5-8:", Index("dog")));
  EXPECT_EQ(Runs("cake\xc3\xa9"
                 "dog")[0],
            absl::StrCat("0-4:", Index("cake"), " 6-9:", Index("dog")));
}

TEST(ListWordsTest, WordsAcrossBlockEdgesAndAtTheEnd) {
  for (size_t pad = 0; pad < 140; ++pad) {
    const std::string text = std::string(pad, '.') + "butterfly cake";
    const std::vector<std::string> runs = Runs(text);
    ASSERT_EQ(runs.size(), 1u) << pad;
    EXPECT_EQ(runs[0],
              absl::StrCat(pad, "-", pad + 9, ":", Index("butterfly"), " ",
                           pad + 10, "-", pad + 14, ":", Index("cake")))
        << pad;
    // A long non-list word across the edge breaks nothing it should not.
    EXPECT_TRUE(
        Runs(std::string(pad, 'x') + " " + std::string(70, 'y')).empty());
  }
}

TEST(ListWordsTest, LongRunsAreWhole) {
  std::string text;
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&text, "Cake ");
  const std::vector<std::string> runs = Runs(text, 1000);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].substr(0, 4), "0-4:");
}

}  // namespace
}  // namespace kvcanary::canaries
