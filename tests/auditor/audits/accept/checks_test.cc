// The checks `accept` states per swept length (auditor/audits/accept/
// checks.h), as a reviewer reads them.
#include "auditor/audits/accept/checks.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

const Check* Find(const std::vector<Check>& checks, const std::string& check) {
  for (const Check& c : checks) {
    if (c.check == check) return &c;
  }
  return nullptr;
}

// Past the limit, a refusal never seen is "not sent" only where nothing
// was sent; where every answer was a 200 without one (a stream dropped
// after its headers) the check says so.
TEST(StatedChecksTest, ARefusalNeverSeenSaysWhetherAnythingCameBack) {
  LengthState l;
  l.length.tokens = 300;
  l.length.past = true;
  const Check* unsent = Find(StatedChecks({l}, false), "refusal");
  ASSERT_NE(unsent, nullptr);
  EXPECT_EQ(unsent->state, "skipped");
  EXPECT_EQ(unsent->message, "not sent");

  l.unanswered = 2;
  const std::vector<Check> checks = StatedChecks({l}, false);
  const Check* dropped = Find(checks, "refusal");
  ASSERT_NE(dropped, nullptr);
  EXPECT_EQ(dropped->state, "skipped");
  EXPECT_EQ(dropped->subject, "length 300");
  EXPECT_EQ(dropped->message,
            "every answer was a 200 without one (2 dropped or unreadable): "
            "neither a refusal nor an admission");
}

}  // namespace
}  // namespace kvcanary::auditor
