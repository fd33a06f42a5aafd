// The router's side of one POST /internal/v1/generate: the decode node's
// NDJSON stream, read on a thread of its own so the client's handler can
// wait for the headers first (and answer with the right status) and then
// relay lines as they come.
//
// Thread-safe.
#ifndef KVCANARY_ENGINE_NODES_DECODE_STREAM_H_
#define KVCANARY_ENGINE_NODES_DECODE_STREAM_H_

#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/tls.h"
#include "nlohmann/json.hpp"

namespace httplib {
class ClientImpl;
}  // namespace httplib

namespace kvcanary::engine {

class DecodeStream {
 public:
  // Starts the request to `url` (the decode node's base URL) with `body`,
  // sending `authorization` as its Authorization header; over mutual TLS
  // when `tls` is set (it must outlive the stream).
  DecodeStream(const std::string& url, std::string authorization,
               std::string body, absl::Duration timeout,
               const tls::Context* tls);
  ~DecodeStream();  // cancels and joins
  DecodeStream(const DecodeStream&) = delete;
  DecodeStream& operator=(const DecodeStream&) = delete;

  // Waits for the response headers: OK if 200, else the node's error (or
  // kUnavailable if it could not be reached).
  absl::Status WaitHeaders();
  // After WaitHeaders() failed with the node's answer: its whole error body
  // as JSON ({"error": ..., "prefill_outcome", "decode_outcome"}); null if
  // there is none or it is not JSON.
  nlohmann::json error_json();
  // The next line; nullopt when the stream ended (see transport()).
  std::optional<nlohmann::json> Next();
  // Why the stream ended before its final line.
  absl::Status transport();
  // Gives up: the stream ends, and a request still waiting for the
  // headers is cut off (its connection shut down), so the decode node sees
  // the router hang up.
  void Cancel();

 private:
  absl::Mutex mu_;
  bool headers_ ABSL_GUARDED_BY(mu_) = false;
  int http_status_ ABSL_GUARDED_BY(mu_) = 0;
  std::string error_body_ ABSL_GUARDED_BY(mu_);
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  std::deque<nlohmann::json> lines_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status transport_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancel_{false};
  // The thread's client while it sends (null before and after).
  httplib::ClientImpl* client_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_DECODE_STREAM_H_
