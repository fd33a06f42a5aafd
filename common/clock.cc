#include "common/clock.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvcanary {

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

std::string Rfc3339Utc(int64_t unix_us) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMicros(unix_us),
                          absl::UTCTimeZone());
}

}  // namespace kvcanary
