// A provider's "slow down" (docs/targets.md, "Rate limits and budgets"): a
// 429 (or a 503 with a Retry-After) is retried after its wait (an
// exponential back-off where a 429 names none), and the campaign's sending rate
// adapts to it, so a paid, rate-limited API is audited at the pace it allows.
// Such answers are neither probe results nor a sign of a target down.
#ifndef KVCANARY_AUDITOR_TARGET_RATE_LIMIT_H_
#define KVCANARY_AUDITOR_TARGET_RATE_LIMIT_H_

#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "auditor/target/completion.h"

namespace kvcanary::auditor {

// How many times one request answered 429/503 is sent again before its
// answer is kept as it is (Outcome "rate_limited").
inline constexpr int kMaxRateLimitRetries = 6;
// The longest wait a Retry-After is taken for; a longer one is cut to this.
inline constexpr absl::Duration kMaxRetryWait = absl::Seconds(60);

// 429 (also an error inside a 200 answer whose type says rate limit or
// overloaded), or a 503 that says when to come back (a Retry-After or
// retry-after-ms header: an overloaded server). A 503 without one is a
// server that failed (an engine whose node is down), judged as before.
bool IsRateLimited(const Completion& c);

// A Retry-After header's value (RFC 9110 10.2.3): delay-seconds, or an
// HTTP-date (read by libcurl's curl_getdate) taken relative to `now` (a
// date in the past: zero). nullopt for anything else.
std::optional<absl::Duration> ParseRetryAfter(absl::string_view value,
                                              absl::Time now);

// An answer's wait from its headers (names lower-cased): `retry-after-ms`
// or `x-ms-retry-after-ms` (milliseconds, as OpenAI's and Azure's SDKs
// read them first), else `retry-after` (ParseRetryAfter).
std::optional<absl::Duration> RetryAfterOf(
    const std::map<std::string, std::string>& headers, absl::Time now);

// The wait before sending again a request answered `c` for the
// `retries`-th time (0: the first): its Retry-After, at most
// kMaxRetryWait; without one 0.5 s * 2^retries, at most 16 s, with up to
// a quarter more at random (so tenants do not come back together).
absl::Duration RetryWait(const Completion& c, int retries);

// The rate probes are sent at: up to `max_per_s`, halved on each 429/503
// (no lower than max_per_s / 64 or 0.5 per second; the request itself
// waits its RetryWait); each answer that was not rate-limited wins back
// 1/32 of the maximum. A token bucket holding at most a second's worth.
// Not thread-safe.
class SendRate {
 public:
  SendRate(double max_per_s, absl::Time now);
  // Whether a probe may be sent now; takes its token when so.
  bool MaySend(absl::Time now);
  void RateLimited();
  void Answered();
  double per_s() const { return rate_; }
  // Times the rate was cut.
  int cuts() const { return cuts_; }

 private:
  const double max_;
  double rate_;
  double tokens_ = 1;
  absl::Time last_;
  int cuts_ = 0;
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_RATE_LIMIT_H_
