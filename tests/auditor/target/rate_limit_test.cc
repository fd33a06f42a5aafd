// A provider's "slow down" read and obeyed (auditor/target/rate_limit.h)
// and what a command spent (auditor/target/spend.h).
#include "auditor/target/rate_limit.h"

#include <map>
#include <string>

#include "absl/time/time.h"
#include "auditor/target/spend.h"
#include "gtest/gtest.h"

namespace kvcanary::auditor {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1796601600);  // 2026-12-07

TEST(RetryAfterTest, ReadsSecondsAndHttpDates) {
  EXPECT_EQ(ParseRetryAfter("1", kNow), absl::Seconds(1));
  EXPECT_EQ(ParseRetryAfter(" 120 ", kNow), absl::Seconds(120));
  EXPECT_EQ(ParseRetryAfter("0", kNow), absl::ZeroDuration());
  // RFC 9110's IMF-fixdate, 30 s after kNow; one in the past waits 0.
  EXPECT_EQ(ParseRetryAfter("Mon, 07 Dec 2026 00:00:30 GMT", kNow),
            absl::Seconds(30));
  EXPECT_EQ(ParseRetryAfter("Sun, 06 Dec 2026 00:00:00 GMT", kNow),
            absl::ZeroDuration());
}

TEST(RetryAfterTest, RefusesWhatIsNeitherSecondsNorADate) {
  for (const char* v : {"", "soon", "-5", "1.5", "12abc"}) {
    EXPECT_FALSE(ParseRetryAfter(v, kNow).has_value()) << v;
  }
}

TEST(RetryAfterTest, MillisecondHeadersComeFirst) {
  std::map<std::string, std::string> h = {{"retry-after", "5"}};
  EXPECT_EQ(RetryAfterOf(h, kNow), absl::Seconds(5));
  h["x-ms-retry-after-ms"] = "250";
  EXPECT_EQ(RetryAfterOf(h, kNow), absl::Milliseconds(250));
  h["retry-after-ms"] = "1500";
  EXPECT_EQ(RetryAfterOf(h, kNow), absl::Milliseconds(1500));
  EXPECT_FALSE(RetryAfterOf({}, kNow).has_value());
}

TEST(RetryWaitTest, UsesRetryAfterCappedElseBacksOffExponentially) {
  Completion c;
  c.status = 429;
  c.retry_after = absl::Seconds(3);
  EXPECT_EQ(RetryWait(c, 0), absl::Seconds(3));
  EXPECT_EQ(RetryWait(c, 4), absl::Seconds(3));
  c.retry_after = absl::Hours(1);
  EXPECT_EQ(RetryWait(c, 0), kMaxRetryWait);
  c.retry_after.reset();
  for (int retries = 0; retries < 8; ++retries) {
    const absl::Duration base =
        std::min(absl::Milliseconds(500) * (1 << std::min(retries, 5)),
                 absl::Seconds(16));
    const absl::Duration wait = RetryWait(c, retries);
    EXPECT_GE(wait, base) << retries;
    EXPECT_LE(wait, base * 1.25) << retries;
  }
}

TEST(RateLimitedTest, Is429Or503WithAWaitAndHasItsOwnOutcome) {
  Completion c;
  c.status = 429;
  EXPECT_TRUE(IsRateLimited(c));
  EXPECT_EQ(Outcome(c), "rate_limited");
  // A 503 without a wait is a server that failed (an engine's node down).
  c.status = 503;
  EXPECT_FALSE(IsRateLimited(c));
  EXPECT_EQ(Outcome(c), "http_5xx");
  c.retry_after = absl::Seconds(2);
  EXPECT_TRUE(IsRateLimited(c));
  EXPECT_EQ(Outcome(c), "rate_limited");
  for (int status : {200, 400, 500, 502}) {
    c.status = status;
    EXPECT_FALSE(IsRateLimited(c)) << status;
  }
}

TEST(SendRateTest, HalvesOnEachLimitAndWinsItBackOnAnswers) {
  absl::Time t = kNow;
  SendRate rate(64, t);
  EXPECT_EQ(rate.per_s(), 64);
  rate.RateLimited();
  EXPECT_EQ(rate.per_s(), 32);
  for (int i = 0; i < 10; ++i) rate.RateLimited();
  EXPECT_EQ(rate.per_s(), 1);  // no lower than max / 64
  EXPECT_EQ(rate.cuts(), 11);
  for (int i = 0; i < 100; ++i) rate.Answered();
  EXPECT_EQ(rate.per_s(), 64);  // never above the maximum
}

TEST(SendRateTest, SendsNoFasterThanItsRate) {
  absl::Time t = kNow;
  SendRate rate(10, t);
  int sent = 0;
  for (int ms = 0; ms < 2000; ms += 5) {
    sent += rate.MaySend(t + absl::Milliseconds(ms));
  }
  EXPECT_GE(sent, 19);
  EXPECT_LE(sent, 21);
  rate.RateLimited();  // 5 per second from now on
  sent = 0;
  t += absl::Seconds(2);
  for (int ms = 0; ms < 2000; ms += 5) {
    sent += rate.MaySend(t + absl::Milliseconds(ms));
  }
  EXPECT_GE(sent, 9);
  EXPECT_LE(sent, 12);
}

Completion Answered(int prompt, int cached, int completion) {
  Completion c;
  c.status = 200;
  c.usable = true;
  c.prompt_tokens = prompt;
  c.cached_tokens = cached;
  c.completion_tokens = completion;
  return c;
}

TEST(SpendLedgerTest, CountsEachTenantsTokensAsReported) {
  SpendLedger s;
  Completion head = Answered(100, 4, 10);
  head.shared_head_tokens = 12;  // taken out by Target::Parse, billed
  s.Note("acme", head);
  s.Note("acme", Answered(50, -1, 5));
  s.Note("globex", Answered(20, 0, 2));
  Completion limited;
  limited.status = 429;
  s.Note("globex", limited);
  s.NoteRetry("globex");
  const TenantSpend& acme = s.tenants().at("acme");
  EXPECT_EQ(acme.prompt_tokens, 150);
  EXPECT_EQ(acme.cached_tokens, 16);
  EXPECT_EQ(acme.completion_tokens, 15);
  const TenantSpend& globex = s.tenants().at("globex");
  EXPECT_EQ(globex.rate_limited, 1);
  EXPECT_EQ(globex.retries, 1);
  EXPECT_EQ(s.spent(), 150 + 15 + 20 + 2);
  EXPECT_EQ(s.largest(), 110);
  EXPECT_TRUE(s.Affordable(1000));  // no budget
}

TEST(SpendLedgerTest, ABudgetAffordsWhatTheLargestAnswerWouldFit) {
  SpendLedger s(1000);
  EXPECT_TRUE(s.Affordable(5));  // nothing seen: no size to go by
  s.Note("acme", Answered(300, 0, 20));
  EXPECT_TRUE(s.Affordable(2));   // 320 + 2 * 320 = 960
  EXPECT_FALSE(s.Affordable(3));  // 1280
  // An answer without usage counts as the largest seen.
  Completion silent;
  silent.status = 200;
  silent.usable = true;
  s.Note("globex", silent);
  EXPECT_EQ(s.spent(), 640);
  EXPECT_TRUE(s.Affordable(1));
  EXPECT_FALSE(s.Affordable(2));
  EXPECT_FALSE(s.stopped());
  s.NoteStopped();
  const nlohmann::json j = s.ToJson();
  EXPECT_EQ(j["budget_tokens"], 1000);
  EXPECT_EQ(j["budget_reached"], true);
  EXPECT_EQ(j["tenants"]["globex"]["unreported_answers"], 1);
}

}  // namespace
}  // namespace kvcanary::auditor
