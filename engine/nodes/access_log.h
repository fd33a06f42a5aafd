// The router's access log (--access-log FILE): one JSON object per line per
// completion request, rotated by size. It records what an operator's log
// forensics needs and nothing a client wrote: counts, timings, statuses and
// what each node reported, never prompt or completion text. docs/api.md
// lists the fields.
//
// Thread-safe: a line is formatted by the caller's thread and appended
// under a mutex with one write(2).
#ifndef KVCANARY_ENGINE_NODES_ACCESS_LOG_H_
#define KVCANARY_ENGINE_NODES_ACCESS_LOG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvcanary::engine {

struct AccessLogOptions {
  std::string path;
  // A line that would take the file past this many bytes first rotates it:
  // FILE -> FILE.1 -> FILE.2 ... up to FILE.<keep>; the oldest goes.
  int64_t max_bytes = int64_t{64} << 20;
  int keep = 5;  // rotated files kept; 0: the full file is just truncated
};

// One request, as the router saw it end. Absent values are JSON null.
struct AccessRecord {
  absl::Time start;      // when the router had the request; "ts"
  std::string endpoint;  // "/v1/completions" or "/v1/chat/completions"
  std::optional<uint64_t> request_id;  // once assigned (after admission)
  std::optional<std::string> tenant;   // the tenants file's id, once known
  int status = 0;                      // the HTTP status sent
  std::optional<int> prompt_tokens;    // once tokenized
  int completion_tokens = 0;
  int cached_tokens = 0;
  std::optional<double> ttft_ms;  // first generated token at the router
  double total_ms = 0;            // until the answer's last byte was handed
                                  // to the connection
  std::optional<std::string> finish_reason;  // "stop" | "length"
  bool stream = false;
  // What the nodes reported: "ok", the error they returned ("DATA_LOSS:
  // ..."), or (prefill) the abort it recorded while going on
  // ("abort_reason: ..."); absent if the node did not answer.
  std::optional<std::string> prefill_outcome;
  std::optional<std::string> decode_outcome;
  // Why the request failed: ErrorReason() of its status (e.g.
  // "context_length_exceeded", "authentication_error", "rate_limit_error",
  // "server_error"), or "client_disconnected".
  std::optional<std::string> reason;
};

// The record as one line of JSON (no newline), keys in a fixed order:
// ts, request_id, tenant, endpoint, status, prompt_tokens,
// completion_tokens, cached_tokens, ttft_ms, total_ms, finish_reason,
// stream, prefill_outcome, decode_outcome, reason. ts is RFC 3339 UTC with
// milliseconds ("2024-05-01T12:00:00.123Z"); times in ms with 3 decimals.
std::string AccessRecordJson(const AccessRecord& record);

class AccessLog {
 public:
  // Opens (creates, appends to) options.path. kInvalidArgument for an empty
  // path, max_bytes < 1 or keep < 0; the OS's error if it cannot be opened.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Open(
      const AccessLogOptions& options);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  // Appends the record's line, rotating first if it would not fit. Errors
  // (disk full, a rename failing) are counted, never returned: a request is
  // not failed for its log line.
  void Write(const AccessRecord& record);
  uint64_t write_errors() const;

 private:
  explicit AccessLog(const AccessLogOptions& options) : options_(options) {}
  absl::Status OpenFile() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Rotate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AccessLogOptions options_;
  mutable absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t size_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t write_errors_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_ACCESS_LOG_H_
