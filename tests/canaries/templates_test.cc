#include "canaries/templates.h"

#include <set>
#include <string>
#include <vector>

#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "gtest/gtest.h"

namespace kvcanary::canaries {
namespace {

TEST(PlantPromptTest, HoldsEveryMarkerVerbatim) {
  std::vector<Marker> markers;
  for (uint64_t c = 0; c < 3; ++c)
    markers.push_back(DeriveMarker("k", "t", "c", c));
  const std::string prompt = PlantPrompt(markers);
  for (const Marker& m : markers) {
    EXPECT_NE(prompt.find(m.text), std::string::npos) << m.text;
  }
}

TEST(PlantPromptTest, ScansAsExactHitsOfItsMarkers) {
  std::vector<Marker> markers;
  MarkerScanner scanner;
  for (uint64_t c = 0; c < 3; ++c) {
    markers.push_back(DeriveMarker("k", "t", "c", c));
    scanner.Add(markers.back(), "t");
  }
  ASSERT_TRUE(scanner.Compile().ok());
  const std::vector<MarkerHit> hits = scanner.Scan(PlantPrompt(markers));
  ASSERT_EQ(hits.size(), 3u);
  for (const MarkerHit& hit : hits) EXPECT_TRUE(hit.exact);
}

TEST(PlantPromptTest, CompactFormHoldsEveryMarkerInFewerBytes) {
  const std::vector<Marker> markers = {DeriveMarker("k", "acme", "c", 0),
                                       DeriveMarker("k", "acme", "c", 1)};
  const std::string compact = CompactPlantPrompt(markers);
  for (const Marker& m : markers) {
    EXPECT_NE(compact.find(m.text), std::string::npos) << compact;
  }
  EXPECT_LT(compact.size(), PlantPrompt(markers).size());
}

TEST(PlantPromptDeathTest, NeedsAMarker) {
  EXPECT_DEATH(PlantPrompt({}), "markers.empty");
}

TEST(SniffPromptTest, VariantsAreDistinctAndWrapAround) {
  std::set<std::string> texts;
  for (int v = 0; v < kSniffPromptVariants; ++v) {
    EXPECT_FALSE(SniffPrompt(v).empty());
    texts.insert(SniffPrompt(v));
  }
  EXPECT_EQ(static_cast<int>(texts.size()), kSniffPromptVariants);
  EXPECT_EQ(SniffPrompt(kSniffPromptVariants + 2), SniffPrompt(2));
}

TEST(GoldenPromptTest, VariantsAreDistinctFixedAndWrapAround) {
  std::set<std::string> texts;
  for (int v = 0; v < kGoldenPromptVariants; ++v) texts.insert(GoldenPrompt(v));
  EXPECT_EQ(static_cast<int>(texts.size()), kGoldenPromptVariants);
  EXPECT_EQ(GoldenPrompt(0),
            "Once upon a time, there was a little girl named Lily.");
  EXPECT_EQ(GoldenPrompt(kGoldenPromptVariants + 1), GoldenPrompt(1));
}

TEST(EchoPromptTest, QuotesTheNonceAndEndsOnTheStoryCharacter) {
  const Marker nonce = DeriveNonce("k", "t", "c", 5);
  const std::string prompt = EchoPrompt(nonce);
  const size_t first = prompt.find(nonce.text);
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(prompt.find(nonce.text, first + 1), std::string::npos);
  const std::string& who = MarkerWordList()[nonce.words[0]];
  EXPECT_NE(prompt.find("there was a " + who + "."), std::string::npos);
  EXPECT_EQ(prompt.substr(prompt.size() - 5), ". The");
}

// The instruction wording: the same texts behind an instruction a chat
// model follows, the nonce's text once, right after kRepeatExactly.
TEST(WordingTest, InstructionWordingWrapsTheSameTexts) {
  const Marker nonce = DeriveNonce("k", "t", "c", 5);
  EXPECT_EQ(EchoPrompt(nonce, Wording::kInstruct),
            std::string(kRepeatExactly) + " " + nonce.text);
  for (uint64_t v = 0; v < 3; ++v) {
    EXPECT_EQ(GoldenPrompt(v, Wording::kInstruct),
              "Continue this story: " + GoldenPrompt(v));
    EXPECT_EQ(SniffPrompt(v, Wording::kInstruct),
              "Continue the text: " + SniffPrompt(v));
  }
  EXPECT_STREQ(WordingName(Wording::kStory), "story");
  EXPECT_STREQ(WordingName(Wording::kInstruct), "instruct");
}

}  // namespace
}  // namespace kvcanary::canaries
