#include "canaries/scanner.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "canaries/marker.h"
#include "gtest/gtest.h"

namespace kvcanary::canaries {
namespace {

constexpr absl::string_view kKey = "scanner-test-key-0123456789abcdef";

Marker TestMarker(absl::string_view tenant, uint64_t counter) {
  return DeriveMarker(kKey, tenant, "campaign", counter);
}

// Words [first, first + count) of `marker`, joined by `separator`.
std::string WordsOf(const Marker& marker, int first, int count,
                    absl::string_view separator = " ") {
  std::vector<std::string> words;
  for (int i = first; i < first + count; ++i) {
    words.push_back(MarkerWordList()[marker.words[i]]);
  }
  return absl::StrJoin(words, separator);
}

// `marker` with its words [at, at + count) replaced by `from`'s words
// [from_at, from_at + count): two random markers share a 3-word window
// about once in 85,000 pairs, so tests make the overlap.
Marker Sharing(Marker marker, int at, const Marker& from, int from_at,
               int count) {
  for (int i = 0; i < count; ++i) {
    marker.words[at + i] = from.words[from_at + i];
  }
  marker.text = MarkerText(marker.words);
  return marker;
}

// Greedy stories260K output for "Once upon a time, there was" (list words
// "ball", "play" not in a run).
constexpr absl::string_view kPlainStory =
    "Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park. One day, she saw a big, red ball. She wanted to "
    "play with it, but it was too high.\nLily's mom said, \"Lily, be careful "
    "with the ball and the tree, the dog and the cat.\"";

TEST(MarkerScannerTest, FindsExactMarkerDespiteCasePunctuationAndLineBreaks) {
  const Marker marker = TestMarker("tenant-a", 1);
  MarkerScanner scanner(3);
  scanner.Add(marker, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());

  const std::string mangled = absl::StrCat(
      absl::AsciiStrToUpper(WordsOf(marker, 0, 5)), ", ",
      WordsOf(marker, 5, 5, "... "), "!\n\n", WordsOf(marker, 10, 6, "\t"));
  const std::string text = absl::StrCat("He sang: \"", mangled, "\" and left.");
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].marker_id, marker.id);
  EXPECT_EQ(hits[0].owner, "tenant-a");
  EXPECT_TRUE(hits[0].exact);
  EXPECT_EQ(hits[0].words_matched, kMarkerWords);
  EXPECT_EQ(hits[0].offset, text.find(mangled));
}

TEST(MarkerScannerTest, FindsExactMarkerAtTextEdges) {
  const Marker marker = TestMarker("tenant-a", 2);
  MarkerScanner scanner(3);
  scanner.Add(marker, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::vector<MarkerHit> hits = scanner.Scan(marker.text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_TRUE(hits[0].exact);
  EXPECT_EQ(hits[0].offset, 0u);
}

TEST(MarkerScannerTest, WordsInsideLongerWordsDoNotMatch) {
  const Marker marker = TestMarker("tenant-a", 3);
  MarkerScanner scanner(2);
  scanner.Add(marker, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  // Every word gets a suffix, so no word is a list word any more.
  std::vector<std::string> words;
  for (int w : marker.words) {
    words.push_back(absl::StrCat(MarkerWordList()[w], "zq"));
  }
  EXPECT_TRUE(scanner.Scan(absl::StrJoin(words, " ")).empty());
}

TEST(MarkerScannerTest, PartialRunAtLeastMinIsAttributedToItsMarker) {
  const Marker a = TestMarker("tenant-a", 10);
  const Marker b = TestMarker("tenant-b", 10);
  MarkerScanner scanner(3);
  scanner.Add(a, "tenant-a");
  scanner.Add(b, "tenant-b");
  ASSERT_TRUE(scanner.Compile().ok());

  const std::string run = WordsOf(b, 6, 4, ", ");
  const std::string text =
      absl::StrCat("Then the girl said: ", run, ". The end.");
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].marker_id, b.id);
  EXPECT_EQ(hits[0].owner, "tenant-b");
  EXPECT_EQ(hits[0].words_matched, 4);
  EXPECT_FALSE(hits[0].exact);
  EXPECT_EQ(hits[0].offset, text.find(run));
}

TEST(MarkerScannerTest, RunShorterThanMinIsIgnored) {
  const Marker a = TestMarker("tenant-a", 11);
  MarkerScanner scanner(3);
  scanner.Add(a, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  EXPECT_TRUE(
      scanner.Scan(absl::StrCat("The ", WordsOf(a, 4, 2), " was happy."))
          .empty());
  // The same two words out of order, or with a word between, are no run.
  EXPECT_TRUE(
      scanner
          .Scan(absl::StrCat("The ", WordsOf(a, 5, 1), " and ",
                             WordsOf(a, 4, 1), " and ", WordsOf(a, 6, 1), "."))
          .empty());
}

TEST(MarkerScannerTest, ReportsOnlyTheLongestRunOfEachMarker) {
  const Marker a = TestMarker("tenant-a", 12);
  MarkerScanner scanner(2);
  scanner.Add(a, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::string text =
      absl::StrCat("One: ", WordsOf(a, 0, 2), ". Two: ", WordsOf(a, 8, 5),
                   ". Three: ", WordsOf(a, 3, 3));
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].words_matched, 5);
  EXPECT_EQ(hits[0].offset, text.find(WordsOf(a, 8, 5)));
}

TEST(MarkerScannerTest, ListsEveryRunOfAMarkerInTextOrder) {
  const Marker a = TestMarker("tenant-a", 12);
  MarkerScanner scanner(2);
  scanner.Add(a, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::string text =
      absl::StrCat("One: ", WordsOf(a, 0, 2), ". Two: ", WordsOf(a, 8, 5),
                   ". Three: ", WordsOf(a, 3, 3), ".");
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 1u);
  const std::vector<MarkerRun>& runs = hits[0].runs;
  ASSERT_EQ(runs.size(), 3u);
  const int first_word[] = {0, 8, 3};
  const int words[] = {2, 5, 3};
  for (int i = 0; i < 3; ++i) {
    const std::string run = WordsOf(a, first_word[i], words[i]);
    EXPECT_EQ(runs[i].marker_word, first_word[i]) << i;
    EXPECT_EQ(runs[i].words, words[i]) << i;
    EXPECT_EQ(runs[i].offset, text.find(run)) << i;
    EXPECT_EQ(runs[i].end, text.find(run) + run.size()) << i;
  }
}

// The failure behind a flaky campaign test: a tenant's own marker echoed
// back holds 3 words another tenant's marker also holds. Both markers have
// a run there, so the caller can see the own marker explains it.
TEST(MarkerScannerTest, MarkersSharingAWindowBothHaveTheRun) {
  const Marker a = TestMarker("tenant-a", 13);
  const Marker b = Sharing(TestMarker("tenant-b", 13), 9, a, 4, 3);
  MarkerScanner scanner(3);
  scanner.Add(a, "tenant-a");
  scanner.Add(b, "tenant-b");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::string text = absl::StrCat("The song: ", a.text, ".");
  std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 2u);
  if (hits[0].marker_id != a.id) std::swap(hits[0], hits[1]);
  ASSERT_EQ(hits[0].marker_id, a.id);
  EXPECT_TRUE(hits[0].exact);
  ASSERT_EQ(hits[0].runs.size(), 1u);
  EXPECT_EQ(hits[0].runs[0].offset, text.find(a.text));
  EXPECT_EQ(hits[0].runs[0].end, text.find(a.text) + a.text.size());

  EXPECT_EQ(hits[1].marker_id, b.id);
  EXPECT_EQ(hits[1].owner, "tenant-b");
  EXPECT_FALSE(hits[1].exact);
  EXPECT_EQ(hits[1].words_matched, 3);
  ASSERT_EQ(hits[1].runs.size(), 1u);
  const std::string shared = WordsOf(a, 4, 3);
  EXPECT_EQ(hits[1].runs[0].marker_word, 9);
  EXPECT_EQ(hits[1].runs[0].offset, text.find(shared));
  EXPECT_EQ(hits[1].runs[0].end, text.find(shared) + shared.size());
}

TEST(MarkerScannerTest, HitsAreSortedByMarkerId) {
  std::vector<Marker> markers;
  MarkerScanner scanner(3);
  std::string text;
  for (uint64_t c = 0; c < 6; ++c) {
    markers.push_back(TestMarker("tenant-a", 100 + c));
    scanner.Add(markers.back(), "tenant-a");
    absl::StrAppend(&text, "Look, the ", markers.back().text, ". ");
  }
  ASSERT_TRUE(scanner.Compile().ok());
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), markers.size());
  for (size_t i = 1; i < hits.size(); ++i) {
    EXPECT_LT(hits[i - 1].marker_id, hits[i].marker_id);
  }
  for (const MarkerHit& hit : hits) EXPECT_TRUE(hit.exact);
}

TEST(MarkerScannerTest, UnregisteredMarkerGivesGenericHit) {
  const Marker registered = TestMarker("tenant-a", 20);
  const Marker unknown = DeriveMarker("another auditor's key", "x", "y", 1);
  MarkerScanner scanner(3);
  scanner.Add(registered, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::string text =
      absl::StrCat("She sang: ", unknown.text, ". Then she slept.");
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].marker_id, "");
  EXPECT_EQ(hits[0].owner, "");
  EXPECT_FALSE(hits[0].exact);
  EXPECT_EQ(hits[0].words_matched, kMarkerWords);
  EXPECT_EQ(hits[0].offset, text.find(unknown.text));
}

TEST(MarkerScannerTest, GenericHitNeedsAtLeastGenericMinWords) {
  const Marker unknown = DeriveMarker("another auditor's key", "x", "y", 2);
  MarkerScanner scanner(3);
  scanner.Add(TestMarker("tenant-a", 21), "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  EXPECT_TRUE(
      scanner
          .Scan(absl::StrCat("A ", WordsOf(unknown, 0, kGenericMinWords - 1)))
          .empty());
  const std::vector<MarkerHit> hits =
      scanner.Scan(absl::StrCat("A ", WordsOf(unknown, 0, kGenericMinWords)));
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].words_matched, kGenericMinWords);
}

TEST(MarkerScannerTest, RegisteredMarkerIsNotAlsoGeneric) {
  const Marker a = TestMarker("tenant-a", 22);
  MarkerScanner scanner(3);
  scanner.Add(a, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::vector<MarkerHit> hits = scanner.Scan(a.text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].marker_id, a.id);
}

TEST(MarkerScannerTest, RegisteredMarkerNextToUnknownOneGivesBothHits) {
  const Marker a = TestMarker("tenant-a", 23);
  const Marker unknown = DeriveMarker("another auditor's key", "x", "y", 3);
  MarkerScanner scanner(3);
  scanner.Add(a, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::string text = absl::StrCat(a.text, " ", unknown.text);
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0].marker_id, "");
  EXPECT_EQ(hits[0].offset, a.text.size() + 1);
  EXPECT_EQ(hits[1].marker_id, a.id);
  EXPECT_TRUE(hits[1].exact);
}

TEST(MarkerScannerTest, PlainStoryTextHasNoHit) {
  MarkerScanner scanner(2);
  for (uint64_t c = 0; c < 50; ++c) scanner.Add(TestMarker("t", c), "t");
  ASSERT_TRUE(scanner.Compile().ok());
  EXPECT_TRUE(scanner.Scan(kPlainStory).empty());
  EXPECT_TRUE(scanner.Scan("").empty());
  EXPECT_TRUE(scanner.Scan("... 123 !!!\n").empty());
}

TEST(MarkerScannerTest, NonceShorterThanWindowMatchesOnlyWhole) {
  const Marker nonce = DeriveNonce(kKey, "tenant-a", "campaign", 1);
  MarkerScanner scanner(kNonceWords + 1);
  scanner.Add(nonce, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::string text = absl::StrCat("It said ", nonce.text, "!");
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_TRUE(hits[0].exact);
  EXPECT_EQ(hits[0].words_matched, kNonceWords);
  EXPECT_EQ(hits[0].offset, text.find(nonce.text));
  EXPECT_TRUE(scanner.Scan(WordsOf(nonce, 0, kNonceWords - 1)).empty());
}

TEST(MarkerScannerTest, EveryWholeCopyOfANonceIsARun) {
  const Marker nonce = DeriveNonce(kKey, "tenant-a", "campaign", 2);
  MarkerScanner scanner(kNonceWords + 1);
  scanner.Add(nonce, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  const std::string text =
      absl::StrCat("It said ", nonce.text, ". Then it said ", nonce.text, ".");
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  ASSERT_EQ(hits.size(), 1u);
  ASSERT_EQ(hits[0].runs.size(), 2u);
  EXPECT_EQ(hits[0].runs[0].offset, text.find(nonce.text));
  EXPECT_EQ(hits[0].runs[1].offset, text.rfind(nonce.text));
  EXPECT_EQ(hits[0].runs[1].words, kNonceWords);
  EXPECT_EQ(hits[0].offset, hits[0].runs[0].offset);
}

TEST(MarkerScannerTest, MinPartialWordsOfMarkerLengthFindsOnlyWholeMarkers) {
  const Marker a = TestMarker("tenant-a", 30);
  MarkerScanner scanner(kMarkerWords);
  scanner.Add(a, "tenant-a");
  ASSERT_TRUE(scanner.Compile().ok());
  EXPECT_EQ(scanner.Scan(a.text).size(), 1u);
  // 15 words: below the window, and below... a generic run? It is a run of
  // list words explained by no registered hit, so it is generic.
  const std::vector<MarkerHit> hits = scanner.Scan(WordsOf(a, 0, 15));
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].marker_id, "");
}

TEST(MarkerScannerTest, DuplicateMarkerIdFailsCompile) {
  const Marker a = TestMarker("tenant-a", 40);
  MarkerScanner scanner(3);
  scanner.Add(a, "tenant-a");
  scanner.Add(a, "tenant-b");
  EXPECT_EQ(scanner.Compile().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MarkerScannerDeathTest, ScanBeforeCompileCrashes) {
  MarkerScanner scanner(3);
  scanner.Add(TestMarker("tenant-a", 50), "tenant-a");
  EXPECT_DEATH(scanner.Scan("anything"), "before a successful Compile");
}

TEST(MarkerScannerDeathTest, AddAfterCompileCrashes) {
  MarkerScanner scanner(3);
  ASSERT_TRUE(scanner.Compile().ok());
  EXPECT_DEATH(scanner.Add(TestMarker("tenant-a", 51), "tenant-a"),
               "Add after Compile");
}

TEST(MarkerScannerDeathTest, MinPartialWordsOutOfRangeCrashes) {
  EXPECT_DEATH(MarkerScanner(0), "min_partial_words");
  EXPECT_DEATH(MarkerScanner(kMarkerWords + 1), "min_partial_words");
}

TEST(MarkerScannerTest, EmptyScannerStillFindsGenericShapes) {
  MarkerScanner scanner(3);
  ASSERT_TRUE(scanner.Compile().ok());
  EXPECT_EQ(scanner.size(), 0);
  const std::vector<MarkerHit> hits =
      scanner.Scan(DeriveMarker("k", "t", "c", 0).text);
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].marker_id, "");
}

TEST(MarkerScannerTest, TenThousandMarkersCompileAndScanCorrectly) {
  constexpr int kMarkers = 10000;
  MarkerScanner scanner(kDefaultMinPartialWords);
  std::vector<Marker> markers;
  markers.reserve(kMarkers);
  for (int i = 0; i < kMarkers; ++i) {
    markers.push_back(TestMarker(absl::StrCat("tenant-", i % 7), i));
    scanner.Add(markers.back(), absl::StrCat("tenant-", i % 7));
  }
  ASSERT_TRUE(scanner.Compile().ok());
  EXPECT_EQ(scanner.size(), kMarkers);

  // Exact copies of three markers, a 5-word partial run of a fourth, and
  // plain story text around them.
  const std::string text =
      absl::StrCat(kPlainStory, "\n", markers[17].text, ". ", kPlainStory, " ",
                   absl::AsciiStrToUpper(markers[4242].text), "\n",
                   WordsOf(markers[777], 9, 5), ". ", markers[9999].text, ".");
  const std::vector<MarkerHit> hits = scanner.Scan(text);
  std::vector<std::string> exact_ids, partial_ids;
  for (const MarkerHit& hit : hits) {
    ASSERT_FALSE(hit.marker_id.empty());
    if (hit.exact) {
      exact_ids.push_back(hit.marker_id);
      EXPECT_EQ(hit.words_matched, kMarkerWords);
    } else if (hit.marker_id == markers[777].id) {
      EXPECT_EQ(hit.words_matched, 5);
      EXPECT_EQ(hit.owner, "tenant-0");  // 777 % 7
      partial_ids.push_back(hit.marker_id);
    } else {
      // A chance 3-word overlap with another marker is possible in
      // principle (about 1% per 3-word window); with this key there is none.
      ADD_FAILURE() << "unexpected hit " << hit.marker_id << " "
                    << hit.words_matched;
    }
  }
  std::vector<std::string> want = {markers[17].id, markers[4242].id,
                                   markers[9999].id};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(exact_ids, want);
  EXPECT_EQ(partial_ids.size(), 1u);
  EXPECT_TRUE(scanner.Scan(kPlainStory).empty());
}

TEST(MarkerScannerTest, ConcurrentScansAgree) {
  MarkerScanner scanner(3);
  std::vector<Marker> markers;
  for (uint64_t c = 0; c < 200; ++c) {
    markers.push_back(TestMarker("t", c));
    scanner.Add(markers.back(), "t");
  }
  ASSERT_TRUE(scanner.Compile().ok());
  std::string text;
  for (int i = 0; i < 200; i += 10) {
    absl::StrAppend(&text, kPlainStory, " ", markers[i].text, ". ");
  }
  const size_t want = scanner.Scan(text).size();
  ASSERT_EQ(want, 20u);
  std::vector<std::thread> threads;
  std::vector<size_t> got(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 20; ++r) got[t] = scanner.Scan(text).size();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t g : got) EXPECT_EQ(g, want);
}

}  // namespace
}  // namespace kvcanary::canaries
