// The decode node's memory of accepted request ids
// (engine/nodes/accepted_requests.h): once per window, forgotten after it
// or past the cap, oldest first.
#include "engine/nodes/accepted_requests.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

TEST(AcceptedRequestsTest, AnIdIsAcceptedOnceWithinTheWindow) {
  AcceptedRequests accepted;
  EXPECT_TRUE(accepted.Accept(RequestId(7), kStart));
  EXPECT_FALSE(accepted.Accept(RequestId(7), kStart + absl::Seconds(1)));
  EXPECT_FALSE(accepted.Accept(RequestId(7), kStart + absl::Minutes(9)));
  EXPECT_TRUE(accepted.Accept(RequestId(8), kStart + absl::Minutes(9)));
}

TEST(AcceptedRequestsTest, IdsOlderThanTheWindowAreForgotten) {
  AcceptedRequests accepted(absl::Minutes(10));
  EXPECT_TRUE(accepted.Accept(RequestId(7), kStart));
  EXPECT_TRUE(accepted.Accept(RequestId(8), kStart + absl::Minutes(5)));
  EXPECT_TRUE(accepted.Accept(RequestId(7), kStart + absl::Minutes(10)));
  EXPECT_EQ(accepted.size(), 2u);  // 7 again and 8; the first 7 is gone
  EXPECT_FALSE(accepted.Accept(RequestId(8), kStart + absl::Minutes(10)));
}

TEST(AcceptedRequestsTest, PastItsCapTheOldestIdIsForgottenFirst) {
  AcceptedRequests accepted(absl::Minutes(10), /*max_ids=*/2);
  EXPECT_TRUE(accepted.Accept(RequestId(1), kStart));
  EXPECT_TRUE(accepted.Accept(RequestId(2), kStart));
  EXPECT_TRUE(accepted.Accept(RequestId(3), kStart));
  EXPECT_EQ(accepted.size(), 2u);
  EXPECT_FALSE(accepted.Accept(RequestId(3), kStart));
  EXPECT_FALSE(accepted.Accept(RequestId(2), kStart));
  EXPECT_TRUE(accepted.Accept(RequestId(1), kStart));
}

}  // namespace
}  // namespace kvcanary::engine
