#include "auditor/target/rate_limit.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "common/random.h"

namespace kvcanary::auditor {

bool IsRateLimited(const Completion& c) {
  return c.status == 429 || (c.status == 503 && c.retry_after.has_value());
}

std::optional<absl::Duration> ParseRetryAfter(absl::string_view value,
                                              absl::Time now) {
  value = absl::StripAsciiWhitespace(value);
  if (value.empty()) return std::nullopt;
  if (absl::ascii_isdigit(static_cast<unsigned char>(value[0]))) {
    int64_t seconds = 0;
    if (!absl::SimpleAtoi(value, &seconds) || seconds < 0) return std::nullopt;
    return absl::Seconds(seconds);
  }
  const std::string date(value);
  const time_t at = curl_getdate(date.c_str(), nullptr);
  if (at == static_cast<time_t>(-1)) return std::nullopt;
  return std::max(absl::ZeroDuration(), absl::FromTimeT(at) - now);
}

std::optional<absl::Duration> RetryAfterOf(
    const std::map<std::string, std::string>& headers, absl::Time now) {
  for (const char* name : {"retry-after-ms", "x-ms-retry-after-ms"}) {
    auto it = headers.find(name);
    int64_t ms = 0;
    if (it != headers.end() &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(it->second), &ms) &&
        ms >= 0) {
      return absl::Milliseconds(ms);
    }
  }
  auto it = headers.find("retry-after");
  if (it == headers.end()) return std::nullopt;
  return ParseRetryAfter(it->second, now);
}

absl::Duration RetryWait(const Completion& c, int retries) {
  if (c.retry_after.has_value()) return std::min(*c.retry_after, kMaxRetryWait);
  const absl::Duration base =
      std::min(absl::Milliseconds(500) * (int64_t{1} << std::min(retries, 5)),
               absl::Seconds(16));
  const double jitter = static_cast<double>(RandomU64() % 1000) / 4000.0;
  return base + base * jitter;
}

SendRate::SendRate(double max_per_s, absl::Time now)
    : max_(max_per_s), rate_(max_per_s), last_(now) {}

bool SendRate::MaySend(absl::Time now) {
  tokens_ = std::min(std::max(1.0, rate_),
                     tokens_ + rate_ * absl::ToDoubleSeconds(now - last_));
  last_ = now;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

void SendRate::RateLimited() {
  ++cuts_;
  rate_ = std::max(rate_ / 2, std::min(max_, std::max(max_ / 64, 0.5)));
  tokens_ = std::min(tokens_, 1.0);
}

void SendRate::Answered() { rate_ = std::min(max_, rate_ + max_ / 32); }

}  // namespace kvcanary::auditor
