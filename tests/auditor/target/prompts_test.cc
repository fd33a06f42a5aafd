// The prompts whose length the auditor predicts (auditor/target/prompts.h):
// here the cache-probing prefix cache-audit and cache_refusal both send.
#include "auditor/target/prompts.h"

#include <cstdint>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

TEST(CacheProbePrefixTest, AUniqueHeadThenOneRandomLetterPerWord) {
  CacheBuster buster;
  uint64_t next = 0;
  const auto counting = [&next] { return next++; };
  const std::string p = CacheProbePrefix(&buster, 4, counting);
  EXPECT_TRUE(std::regex_match(p, std::regex(R"(\d{10} Ticket\. a b c d)")))
      << p;
  // Letters wrap after z to the capitals, and after Z to a again.
  next = 25;
  EXPECT_TRUE(std::regex_match(CacheProbePrefix(&buster, 3, counting),
                               std::regex(R"(\d{10} Ticket\. z A B)")));
  next = 51;
  EXPECT_TRUE(std::regex_match(CacheProbePrefix(&buster, 2, counting),
                               std::regex(R"(\d{10} Ticket\. Z a)")));
}

TEST(CacheProbePrefixTest, TwoPrefixesDifferInTheirHead) {
  CacheBuster buster;
  const auto zero = [] { return uint64_t{0}; };
  const std::string a = CacheProbePrefix(&buster, 48, zero);
  const std::string b = CacheProbePrefix(&buster, 48, zero);
  EXPECT_NE(a.substr(0, a.find('.')), b.substr(0, b.find('.')));
  EXPECT_EQ(a.substr(a.find('.')), b.substr(b.find('.')));
  EXPECT_EQ(a.size(), std::string("Ticket 0123456789.").size() + 2 * 48);
}

}  // namespace
}  // namespace kvcanary::auditor
