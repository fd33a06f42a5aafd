// The output scan's judgement of marker runs: a run of another tenant's
// marker is a finding unless the reader's own marker or the probe's own
// prompt explains the same words.
#include "auditor/detectors/output_scan.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "canaries/templates.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

using canaries::Marker;

constexpr absl::string_view kKey = "detectors-test-key-0123456789abcdef";

Marker TenantMarker(absl::string_view tenant, uint64_t counter) {
  return canaries::DeriveMarker(kKey, tenant, "campaign", counter);
}

// `marker` with its words [at, at + words.size()) replaced by `words`: two
// random markers share a 3-word window about once in 85,000 pairs, so the
// tests make the overlap instead of searching for one.
Marker WithWordsAt(Marker marker, int at, const std::vector<int>& words) {
  for (size_t i = 0; i < words.size(); ++i) marker.words[at + i] = words[i];
  marker.text = canaries::MarkerText(marker.words);
  return marker;
}

std::vector<int> WordsOf(const Marker& marker, int first, int count) {
  return std::vector<int>(marker.words.begin() + first,
                          marker.words.begin() + first + count);
}

std::string TextOf(const std::vector<int>& words) {
  return canaries::MarkerText(words);
}

bool Reports(const canaries::MarkerScanner& scanner, absl::string_view text,
             const Marker& marker) {
  for (const canaries::MarkerHit& hit : scanner.Scan(text)) {
    if (hit.marker_id == marker.id) return true;
  }
  return false;
}

// acme's marker, and an initech marker whose words 9..11 are acme's words
// 4..6: a 3-word run of either is a run of both.
class SharedWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scanner_.Add(acme_, "acme");
    scanner_.Add(initech_, "initech");
    ASSERT_TRUE(scanner_.Compile().ok());
  }

  const Marker acme_ = TenantMarker("acme", 0);
  const Marker initech_ =
      WithWordsAt(TenantMarker("initech", 0), 9, WordsOf(acme_, 4, 3));
  canaries::MarkerScanner scanner_{canaries::kDefaultMinPartialWords};
};

TEST_F(SharedWindowTest, ReaderEchoingItsOwnMarkerIsNotAFinding) {
  const std::string output = absl::StrCat("The song: ", acme_.text, ".");
  // The scanner does see initech's run inside acme's marker...
  ASSERT_TRUE(Reports(scanner_, output, initech_));
  // ...and acme's own marker explains it.
  EXPECT_TRUE(ScanOutput(scanner_, output, "acme", "plant").empty());
}

TEST_F(SharedWindowTest, SharedWordsAloneAreTheReadersOwn) {
  // The three shared words and nothing else: acme's own marker explains
  // them for acme; for globex both markers are foreign.
  const std::string output =
      absl::StrCat("Then the ", TextOf(WordsOf(acme_, 4, 3)), " sang.");
  EXPECT_TRUE(ScanOutput(scanner_, output, "acme", "sniff").empty());
  EXPECT_EQ(ScanOutput(scanner_, output, "globex", "sniff").size(), 2u);
}

TEST_F(SharedWindowTest, ForeignPartialRunOnItsOwnIsAFinding) {
  const std::string output =
      absl::StrCat("Then the ", TextOf(WordsOf(initech_, 0, 3)), " sang.");
  const std::vector<Finding> found =
      ScanOutput(scanner_, output, "acme", "sniff");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "foreign_marker");
  EXPECT_EQ(found[0].severity, Severity::kHigh);
  EXPECT_EQ(found[0].writer, "initech");
  EXPECT_EQ(found[0].reader, "acme");
  EXPECT_EQ(found[0].detail["marker"], initech_.id);
  EXPECT_EQ(found[0].detail["words_matched"], 3);
  EXPECT_EQ(found[0].detail["exact"], false);
}

TEST_F(SharedWindowTest, ForeignRunReachingPastTheOwnMarkerIsAFinding) {
  // acme's words 0..6, then initech's word 12: initech's words 9..12, of
  // which acme's marker explains only the first three.
  const std::string output =
      absl::StrCat("The ", TextOf(WordsOf(acme_, 0, 7)), " ",
                   TextOf(WordsOf(initech_, 12, 1)), ".");
  const std::vector<Finding> found =
      ScanOutput(scanner_, output, "acme", "sniff");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].writer, "initech");
  EXPECT_EQ(found[0].detail["words_matched"], 4);
}

TEST_F(SharedWindowTest, ForeignRunElsewhereIsAFindingThoughOneIsExplained) {
  // Two 3-word runs of initech's marker: the first inside acme's echoed
  // marker, the second (words 8..10) more than acme's words explain.
  const std::string output = absl::StrCat(
      acme_.text, ". Then the ", TextOf(WordsOf(initech_, 8, 3)), " sang.");
  const std::vector<Finding> found =
      ScanOutput(scanner_, output, "acme", "plant");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].writer, "initech");
  EXPECT_EQ(found[0].detail["words_matched"], 3);
}

TEST_F(SharedWindowTest, AnotherTenantsMarkerExplainsNothing) {
  // globex reads acme's marker: acme's is a leak, and initech's run inside
  // it is no less foreign to globex.
  std::map<std::string, Severity> severity;  // by writer
  for (const Finding& f : ScanOutput(scanner_, acme_.text, "globex", "sniff")) {
    severity[f.writer] = f.severity;
  }
  EXPECT_EQ(severity,
            (std::map<std::string, Severity>{{"acme", Severity::kCritical},
                                             {"initech", Severity::kHigh}}));
}

TEST_F(SharedWindowTest, WholeForeignMarkerIsCritical) {
  const std::vector<Finding> found =
      ScanOutput(scanner_, absl::StrCat("and then ", initech_.text, " the end"),
                 "acme", "sniff", canaries::PlantPrompt({acme_}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].severity, Severity::kCritical);
  EXPECT_EQ(found[0].detail["exact"], true);
  EXPECT_EQ(found[0].detail["words_matched"], canaries::kMarkerWords);
}

// Words of another tenant's marker that the probe's own prompt holds: the
// prompt's "song" before acme's first two words, in a plant echoed back.
TEST(ScanOutputTest, RunTheProbesOwnPromptHoldsIsNotAFinding) {
  const Marker acme = TenantMarker("acme", 1);
  const std::vector<int> window = {canaries::MarkerWordIndex("song"),
                                   acme.words[0], acme.words[1]};
  const Marker initech = WithWordsAt(TenantMarker("initech", 1), 2, window);
  canaries::MarkerScanner scanner(canaries::kDefaultMinPartialWords);
  scanner.Add(acme, "acme");
  scanner.Add(initech, "initech");
  ASSERT_TRUE(scanner.Compile().ok());

  const std::string prompt = canaries::CompactPlantPrompt({acme});
  ASSERT_TRUE(Reports(scanner, prompt, initech));
  EXPECT_TRUE(ScanOutput(scanner, prompt, "acme", "plant", prompt).empty());
  // Not known to come from the prompt, "song" makes the run more than
  // acme's marker explains.
  EXPECT_EQ(ScanOutput(scanner, prompt, "acme", "plant").size(), 1u);
  // The prompt explains only the words it holds.
  const std::string longer =
      absl::StrCat("The ", TextOf(WordsOf(initech, 2, 4)), ".");
  const std::vector<Finding> found =
      ScanOutput(scanner, longer, "acme", "sniff", prompt);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].detail["words_matched"], 4);
}

// An echo probe's nonce is no registered marker; the prompt explains a run
// of another tenant's marker inside it.
TEST(ScanOutputTest, EchoedNonceHoldingAForeignRunIsNotAFinding) {
  const Marker nonce = canaries::DeriveNonce(kKey, "acme", "campaign", 0);
  const Marker initech =
      WithWordsAt(TenantMarker("initech", 2), 5, WordsOf(nonce, 1, 3));
  canaries::MarkerScanner scanner(canaries::kDefaultMinPartialWords);
  scanner.Add(TenantMarker("acme", 2), "acme");
  scanner.Add(initech, "initech");
  ASSERT_TRUE(scanner.Compile().ok());

  const std::string output = absl::StrCat(" ", nonce.text, ". The");
  ASSERT_TRUE(Reports(scanner, output, initech));
  EXPECT_TRUE(
      ScanOutput(scanner, output, "acme", "echo", canaries::EchoPrompt(nonce))
          .empty());
  EXPECT_EQ(ScanOutput(scanner, output, "acme", "echo").size(), 1u);
}

}  // namespace
}  // namespace kvcanary::auditor
