// Stop strings matched in text fed in pieces (engine/nodes/stop_matcher.h).
#include "engine/nodes/stop_matcher.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

std::pair<std::string, bool> Stopped(std::string text) {
  return {std::move(text), true};
}

// Feeds `pieces` and returns everything emitted (plus Flush() if no stop).
std::pair<std::string, bool> FeedAll(std::vector<std::string> stops,
                                     const std::vector<std::string>& pieces) {
  StopMatcher matcher(std::move(stops));
  std::string out;
  for (const std::string& piece : pieces) {
    const StopMatcher::Emit emit = matcher.Feed(piece);
    out += emit.text;
    if (emit.stopped) return {out, true};
  }
  return {out + matcher.Flush(), false};
}

TEST(StopMatcherTest, NoStopsPassesEverythingThrough) {
  StopMatcher matcher({});
  const StopMatcher::Emit emit = matcher.Feed("hello");
  EXPECT_EQ(emit.text, "hello");
  EXPECT_FALSE(emit.stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, StopsWithinOneFeed) {
  StopMatcher matcher({"END"});
  const StopMatcher::Emit emit = matcher.Feed("abcENDxyz");
  EXPECT_EQ(emit.text, "abc");
  EXPECT_TRUE(emit.stopped);
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.Feed("more").text, "");
  EXPECT_TRUE(matcher.Feed("more").stopped);
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, HoldsBackAPossibleStopSplitAcrossFeeds) {
  StopMatcher matcher({"END"});
  StopMatcher::Emit emit = matcher.Feed("abcE");
  EXPECT_EQ(emit.text, "abc");
  EXPECT_FALSE(emit.stopped);
  emit = matcher.Feed("N");
  EXPECT_EQ(emit.text, "");
  emit = matcher.Feed("Dxyz");
  EXPECT_EQ(emit.text, "");
  EXPECT_TRUE(emit.stopped);
}

TEST(StopMatcherTest, ReleasesHeldTextWhenItStopsLookingLikeAStop) {
  StopMatcher matcher({"END"});
  EXPECT_EQ(matcher.Feed("abEN").text, "ab");
  EXPECT_EQ(matcher.Feed("x").text, "ENx");
  EXPECT_EQ(matcher.Feed("E").text, "");
  EXPECT_EQ(matcher.Flush(), "E");
}

TEST(StopMatcherTest, OverlappingPrefixRestartsTheMatch) {
  // "aab" holds "aa"; the stop "ab" begins at the second 'a'.
  StopMatcher matcher({"ab"});
  EXPECT_EQ(matcher.Feed("xa").text, "x");
  StopMatcher::Emit emit = matcher.Feed("a");
  EXPECT_EQ(emit.text, "a");
  EXPECT_FALSE(emit.stopped);
  emit = matcher.Feed("b");
  EXPECT_EQ(emit.text, "");
  EXPECT_TRUE(emit.stopped);
  EXPECT_EQ(FeedAll({"abab"}, {"aba", "bab"}), Stopped(""));
  EXPECT_EQ(FeedAll({"abac"}, {"ababa", "c"}), Stopped("ab"));
}

TEST(StopMatcherTest, HoldsBackTheLongestPrefixOfAnyStop) {
  StopMatcher matcher({"xyz", "yzw"});
  EXPECT_EQ(matcher.Feed("ayz").text, "a");  // "yz" could become "yzw"
  EXPECT_EQ(matcher.Flush(), "yz");
}

TEST(StopMatcherTest, FirstEndingStopWins) {
  // "bc" ends before "abcd" would.
  EXPECT_EQ(FeedAll({"abcd", "bc"}, {"xabcd"}), Stopped("xa"));
  // Both end at the same byte: the earlier start wins.
  EXPECT_EQ(FeedAll({"c", "bc"}, {"abcd"}), Stopped("a"));
}

TEST(StopMatcherTest, ResultDoesNotDependOnHowTextIsSplit) {
  const std::vector<std::string> stops = {"\n\n", "abab", "ba", "END"};
  for (const std::string text :
       {"xxababyy", "a\nb\n\nc", "aaEN\nEND", "bbbbb", "abaab", "EN", ""}) {
    const auto whole = FeedAll(stops, {text});
    std::vector<std::string> bytes;
    for (char c : text) bytes.push_back(std::string(1, c));
    EXPECT_EQ(FeedAll(stops, bytes), whole) << text;
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      EXPECT_EQ(FeedAll(stops, {text.substr(0, cut), text.substr(cut)}), whole)
          << text << " cut at " << cut;
    }
  }
}

}  // namespace
}  // namespace kvcanary::engine
