// Request and Response of the HTTP server (common/http_message.h): the
// reason phrase of a status.
#include "common/http_message.h"

#include "gtest/gtest.h"

namespace kvcanary::http {
namespace {

TEST(StatusReasonTest, NamesKnownStatusesAndNothingElse) {
  EXPECT_EQ(StatusReason(100), "Continue");
  EXPECT_EQ(StatusReason(200), "OK");
  EXPECT_EQ(StatusReason(404), "Not Found");
  EXPECT_EQ(StatusReason(429), "Too Many Requests");
  EXPECT_EQ(StatusReason(505), "HTTP Version Not Supported");
  EXPECT_EQ(StatusReason(299), "");
  EXPECT_EQ(StatusReason(0), "");
  EXPECT_EQ(StatusReason(-1), "");
}

}  // namespace
}  // namespace kvcanary::http
