// Wall-clock time as evidence, logs and reports write it: Unix
// microseconds, and RFC 3339 in UTC with milliseconds.
#ifndef KVCANARY_COMMON_CLOCK_H_
#define KVCANARY_COMMON_CLOCK_H_

#include <cstdint>
#include <string>

namespace kvcanary {

// Now, in microseconds since the Unix epoch.
int64_t NowUs();

// "2026-12-03T10:15:00.123Z".
std::string Rfc3339Utc(int64_t unix_us);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_CLOCK_H_
