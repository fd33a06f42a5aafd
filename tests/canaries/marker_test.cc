#include "canaries/marker.h"

#include <openssl/sha.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "canaries/marker_key.h"
#include "gtest/gtest.h"

namespace kvcanary::canaries {
namespace {

constexpr absl::string_view kKey = "0123456789abcdef0123456789abcdef";

TEST(MarkerWordListTest, HasPowerOfTwoDistinctLowerCaseWords) {
  const std::vector<std::string>& list = MarkerWordList();
  ASSERT_EQ(static_cast<int>(list.size()), kWordListSize);
  EXPECT_EQ(1 << kMarkerWordBits, kWordListSize);
  EXPECT_EQ(list.size() & (list.size() - 1), 0u);
  std::set<std::string> distinct(list.begin(), list.end());
  EXPECT_EQ(distinct.size(), list.size());
  for (const std::string& word : list) {
    ASSERT_FALSE(word.empty());
    for (char c : word) EXPECT_TRUE(c >= 'a' && c <= 'z') << word;
  }
}

TEST(MarkerWordListTest, HoldsNoFunctionWords) {
  for (const char* word : {"the", "a", "an", "and", "was", "she", "he", "it",
                           "to", "of", "in", "said", "with", "her", "his"}) {
    EXPECT_EQ(MarkerWordIndex(word), -1) << word;
  }
}

TEST(MarkerWordListTest, IndexIsInverseOfList) {
  for (int i = 0; i < kWordListSize; ++i) {
    EXPECT_EQ(MarkerWordIndex(MarkerWordList()[i]), i);
  }
  EXPECT_EQ(MarkerWordIndex("Apple"), -1);  // callers lower-case first
  EXPECT_EQ(MarkerWordIndex(""), -1);
}

// Markers are re-derived from (key, tenant, campaign, counter) to re-check
// old evidence, so the list must never change: pin its SHA-256.
TEST(MarkerWordListTest, IsPinned) {
  const std::string joined = absl::StrJoin(MarkerWordList(), " ");
  uint8_t digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const uint8_t*>(joined.data()), joined.size(),
         digest);
  EXPECT_EQ(HexEncode(digest),
            "fb690ac98732bd058e4a9c35787515ad0c9e9688120014fea1e3e90e73c842cd");
}

// Expected values computed independently (Python hmac + the documented
// encoding and rendering).
TEST(MarkerTest, MatchesIndependentReference) {
  const Marker marker =
      DeriveMarker("golden-key", "tenant-a", "campaign-1", 42);
  EXPECT_EQ(marker.id, "m7661134382185ee1");
  EXPECT_EQ(marker.text,
            "coin letter grass monkey door bike paint rock squirrel cheese "
            "star pond robot river basket window");
}

TEST(NonceTest, MatchesIndependentReference) {
  const Marker nonce = DeriveNonce("golden-key", "tenant-a", "campaign-1", 42);
  EXPECT_EQ(nonce.id, "nff4b3e90ca135050");
  EXPECT_EQ(nonce.text, "milk shoe farmer letter");
}

TEST(MarkerTest, CarriesAtLeast128Bits) {
  EXPECT_GE(kMarkerWords * std::log2(MarkerWordList().size()), 128.0);
  EXPECT_EQ(kMarkerWords * kMarkerWordBits, 128);
}

TEST(MarkerTest, RenderTakesIdFromFirstEightBytesAndWordsFromTheNext) {
  MarkerSeed seed;
  for (int i = 0; i < static_cast<int>(seed.bytes.size()); ++i) {
    seed.bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  }
  const Marker marker = RenderMarker(seed);
  EXPECT_EQ(marker.id, "m030a11181f262d34");
  ASSERT_EQ(static_cast<int>(marker.words.size()), kMarkerWords);
  for (int i = 0; i < kMarkerWords; ++i) {
    EXPECT_EQ(marker.words[i], seed.bytes[kMarkerIdBytes + i]);
  }
}

TEST(MarkerTest, TextIsTheWordsJoinedBySingleSpaces) {
  const Marker marker = DeriveMarker(kKey, "tenant-a", "campaign-1", 7);
  std::vector<std::string> parts = absl::StrSplit(marker.text, ' ');
  ASSERT_EQ(static_cast<int>(parts.size()), kMarkerWords);
  for (int i = 0; i < kMarkerWords; ++i) {
    EXPECT_EQ(parts[i], MarkerWordList()[marker.words[i]]);
  }
  EXPECT_EQ(marker.text, MarkerText(marker.words));
}

TEST(MarkerTest, IdIsMPlusSixteenLowerHexOfTheSeed) {
  const Marker marker = DeriveMarker(kKey, "tenant-a", "campaign-1", 7);
  const MarkerSeed seed = DeriveMarkerSeed(kKey, "tenant-a", "campaign-1", 7);
  ASSERT_EQ(marker.id.size(), 17u);
  EXPECT_EQ(marker.id[0], 'm');
  EXPECT_EQ(marker.id.substr(1),
            HexEncode(absl::MakeConstSpan(seed.bytes.data(), kMarkerIdBytes)));
  for (char c : marker.id.substr(1)) {
    EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << c;
  }
}

TEST(MarkerTest, DeriveIsRenderOfDerivedSeed) {
  const Marker a = DeriveMarker(kKey, "tenant-a", "campaign-1", 7);
  const Marker b =
      RenderMarker(DeriveMarkerSeed(kKey, "tenant-a", "campaign-1", 7));
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.words, b.words);
  EXPECT_EQ(a.text, b.text);
}

TEST(MarkerTest, DeriveIsDeterministic) {
  const Marker a = DeriveMarker(kKey, "tenant-a", "campaign-1", 7);
  const Marker b = DeriveMarker(kKey, "tenant-a", "campaign-1", 7);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.text, b.text);
}

TEST(MarkerTest, DeriveChangesWithEachInput) {
  const Marker base = DeriveMarker(kKey, "tenant-a", "campaign-1", 7);
  const Marker variants[] = {
      DeriveMarker("another key of 32 bytes.........", "tenant-a", "campaign-1",
                   7),
      DeriveMarker(kKey, "tenant-b", "campaign-1", 7),
      DeriveMarker(kKey, "tenant-a", "campaign-2", 7),
      DeriveMarker(kKey, "tenant-a", "campaign-1", 8),
  };
  for (const Marker& v : variants) {
    EXPECT_NE(v.id, base.id);
    EXPECT_NE(v.text, base.text);
  }
}

TEST(MarkerTest, ManyMarkersHaveDistinctIdsAndTexts) {
  std::set<std::string> ids, texts;
  for (uint64_t c = 0; c < 2000; ++c) {
    const Marker m = DeriveMarker(kKey, "tenant-a", "campaign-1", c);
    ids.insert(m.id);
    texts.insert(m.text);
  }
  EXPECT_EQ(ids.size(), 2000u);
  EXPECT_EQ(texts.size(), 2000u);
}

TEST(MarkerTest, WordsAreRoughlyUniformOverTheList) {
  // 4000 markers x 16 words = 64000 draws, 250 per word expected; a word
  // outside [150, 350] is > 6 sigma off and would mean biased rendering.
  std::vector<int> counts(kWordListSize, 0);
  for (uint64_t c = 0; c < 4000; ++c) {
    for (int w : DeriveMarker(kKey, "t", "c", c).words) ++counts[w];
  }
  for (int i = 0; i < kWordListSize; ++i) {
    EXPECT_GT(counts[i], 150) << MarkerWordList()[i];
    EXPECT_LT(counts[i], 350) << MarkerWordList()[i];
  }
}

TEST(NonceTest, IsShortWithItsOwnIdPrefix) {
  const Marker nonce = DeriveNonce(kKey, "tenant-a", "campaign-1", 7);
  EXPECT_EQ(static_cast<int>(nonce.words.size()), kNonceWords);
  ASSERT_EQ(nonce.id.size(), 17u);
  EXPECT_EQ(nonce.id[0], 'n');
  EXPECT_EQ(nonce.text, MarkerText(nonce.words));
}

TEST(NonceTest, IsDeterministicAndSeparateFromTheMarker) {
  const Marker a = DeriveNonce(kKey, "tenant-a", "campaign-1", 7);
  const Marker b = DeriveNonce(kKey, "tenant-a", "campaign-1", 7);
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.text, b.text);
  const Marker marker = DeriveMarker(kKey, "tenant-a", "campaign-1", 7);
  EXPECT_NE(a.id.substr(1), marker.id.substr(1));
}

TEST(NonceTest, ChangesWithEachInput) {
  const Marker base = DeriveNonce(kKey, "tenant-a", "campaign-1", 7);
  for (const Marker& v : {DeriveNonce("other", "tenant-a", "campaign-1", 7),
                          DeriveNonce(kKey, "tenant-b", "campaign-1", 7),
                          DeriveNonce(kKey, "tenant-a", "campaign-2", 7),
                          DeriveNonce(kKey, "tenant-a", "campaign-1", 8)}) {
    EXPECT_NE(v.id, base.id);
  }
}

}  // namespace
}  // namespace kvcanary::canaries
