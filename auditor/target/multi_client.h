// Concurrent HTTP probes over libcurl's multi interface: one thread drives
// up to `max_concurrent` transfers at once, each with its own easy handle
// (no connection shared between tenants), and times the first response
// byte of each (for streamed completions: the first token).
#ifndef KVCANARY_AUDITOR_TARGET_MULTI_CLIENT_H_
#define KVCANARY_AUDITOR_TARGET_MULTI_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvcanary::auditor {

struct ProbeRequest {
  uint64_t id = 0;
  std::string url;
  std::string body;  // POSTed as application/json; empty: GET
  std::vector<std::string> headers;
  absl::Duration timeout = absl::Seconds(60);
  // A client that gives up on purpose (the campaign's hang-ups): it closes
  // the connection this long after the request started, or as soon as the
  // first body byte arrives; the response is then `hung_up`.
  absl::Duration hang_up_after = absl::InfiniteDuration();
  bool hang_up_at_first_byte = false;
};

struct ProbeResponse {
  uint64_t id = 0;
  absl::Status transport;  // OK if a complete HTTP response arrived
  int status = 0;
  std::string body;
  // Response headers, names lower-cased (the last value of a repeated one).
  std::map<std::string, std::string> headers;
  absl::Duration first_byte;  // request start to the first body byte
  absl::Duration total;
  // The client hung up as the request asked, before the answer ended.
  bool hung_up = false;
};

class MultiClient {
 public:
  explicit MultiClient(int max_concurrent, size_t max_response_bytes = 8 << 20);
  // Keeps up to max_concurrent requests in flight: asks `next` for another
  // whenever there is room (nullopt: none right now), hands each response
  // to `on_done` (on this thread), and returns when `done()` is true and
  // nothing is in flight.
  void Run(const std::function<std::optional<ProbeRequest>()>& next,
           const std::function<void(ProbeResponse)>& on_done,
           const std::function<bool()>& done);

 private:
  const int max_concurrent_;
  const size_t max_response_bytes_;
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_MULTI_CLIENT_H_
