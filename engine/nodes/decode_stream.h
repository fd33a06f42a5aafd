// The router's side of one POST /internal/v1/generate: the decode node's
// NDJSON stream, read on a thread of its own so the client's handler can
// wait for the headers first (and answer with the right status) and then
// relay lines as they come. The request travels on a connection of the
// router's NodePool (engine/nodes/node_pool.h), parsed by Beast's HTTP/1.1
// response parser; one read to its end goes back to the pool.
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
#include "engine/nodes/node_pool.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {

class DecodeStream {
 public:
  // Starts the request to `url` (the decode node's base URL) with `body`,
  // sending `authorization` as its Authorization header, on a connection
  // of `pool` (which must outlive the stream).
  DecodeStream(const std::string& url, std::string authorization,
               std::string body, absl::Duration timeout, NodePool* pool);
  // Cancels and joins; a stream whose final line came first waits (up to
  // a second) for the end of the answer, so its connection is kept.
  ~DecodeStream();
  DecodeStream(const DecodeStream&) = delete;
  DecodeStream& operator=(const DecodeStream&) = delete;

  // Waits for the response headers: OK if 200, else the node's error
  // (kUnavailable if it could not be reached, kCancelled if given up
  // first; kDataLoss where the node answered 409, a request it had read
  // already when it was sent again on a new connection).
  absl::Status WaitHeaders();
  // After WaitHeaders() failed with the node's answer: its whole error body
  // as JSON ({"error": ..., "prefill_outcome", "decode_outcome"}); null if
  // there is none or it is not JSON.
  nlohmann::json error_json();
  // The next line; nullopt when the stream ended (see transport()).
  std::optional<nlohmann::json> Next();
  // Why the stream ended before its final line.
  absl::Status transport();
  // Gives up: the stream ends, and its connection is closed, so the decode
  // node sees the router hang up (with the fault cancel-reuse-channel, a
  // request still waiting for the headers leaves its connection to the
  // pool instead: NodePool::ReleaseCancelled).
  void Cancel();

 private:
  absl::Mutex mu_;
  bool headers_ ABSL_GUARDED_BY(mu_) = false;
  int http_status_ ABSL_GUARDED_BY(mu_) = 0;
  std::string error_body_ ABSL_GUARDED_BY(mu_);
  std::string buffer_ ABSL_GUARDED_BY(mu_);
  std::deque<nlohmann::json> lines_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool final_line_ ABSL_GUARDED_BY(mu_) = false;  // the node's last line came
  absl::Status transport_ ABSL_GUARDED_BY(mu_);
  // The thread's whole request: sends it on a connection of `pool` (once
  // more on a new one if a kept one turns out closed: the decode node
  // answers 409 to a request id it read already, so a request is never run
  // twice) and reads the answer; OK when it was read to its end.
  absl::Status Run(const std::string& url, const std::string& authorization,
                   const std::string& body, absl::Duration timeout,
                   NodePool* pool);
  // Reads one response from `connection` until it ends, each read within
  // `timeout`. Sets *received once a byte of it has arrived, and
  // *keep_alive to whether the node keeps the connection open after it.
  absl::Status ReadResponse(NodeConnection& connection, absl::Duration timeout,
                            bool* received, bool* keep_alive);
  // Parsed body bytes of a 200: NDJSON lines.
  void OnBody(std::string& body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::atomic<bool> cancel_{false};
  // The connection the thread is using (null before and after), and
  // whether the fault keeps it on a cancel before the headers.
  NodeConnection* connection_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool reuse_cancelled_ = false;
  // Written by Cancel(): wakes the thread from its waits on the socket.
  const int wake_fd_;
  std::thread thread_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_DECODE_STREAM_H_
