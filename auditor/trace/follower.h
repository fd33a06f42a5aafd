// Follows one engine node's trace stream (GET <node>/v1/trace, kvt1 or kvt2
// lines as docs/trace-format.md describes) on its own thread with libcurl,
// replaying every event into a shadow ledger of its own (one node per
// follower), stamped with the wall clock at which it was applied.
#ifndef KVCANARY_AUDITOR_TRACE_FOLLOWER_H_
#define KVCANARY_AUDITOR_TRACE_FOLLOWER_H_

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auditor/trace/shadow_ledger.h"
#include "common/tls.h"
#include "common/trace_event.h"

namespace kvcanary::auditor {

// The admin token a node's GET /v1/trace requires, from the file
// --trace-token-file names (one line; "" when `path` is empty).
// kInvalidArgument naming the file (never its content) if unreadable or
// empty.
absl::StatusOr<std::string> ReadTraceToken(const std::string& path);

// --trace's node base URLs without trailing slashes; kInvalidArgument for
// one that is not http(s).
absl::StatusOr<std::vector<std::string>> NormalizeTraceUrls(
    std::vector<std::string> urls);

// Start, Stop and the destructor belong to one owning thread; findings(),
// stats() and request_tenants() are thread-safe. libcurl's callbacks run on
// the follower's own thread and share the answer and the ledger under mu_.
class TraceFollower {
 public:
  // `token`: sent as "Authorization: Bearer <token>"; "" sends none.
  // `tls`: for nodes that require mutual TLS (kvcanary-engine --tls), the
  // client certificate and key to present and the only CA to trust; empty
  // for plain nodes.
  explicit TraceFollower(std::string node_url, std::string token = "",
                         tls::Files tls = {});
  ~TraceFollower();  // stops
  TraceFollower(const TraceFollower&) = delete;
  TraceFollower& operator=(const TraceFollower&) = delete;

  // Connects and starts following. Returns once the node has answered the
  // subscription (so events from now on are seen), or the error: the node
  // unreachable, a non-200 answer (kUnavailable / kFailedPrecondition).
  absl::Status Start(absl::Duration connect_timeout = absl::Seconds(5));
  // Waits `grace` for the tail of the stream, then hangs up. Returns the
  // stream's status: OK, or why it broke (a malformed line is kDataLoss).
  absl::Status Stop(absl::Duration grace = absl::Milliseconds(300));

  // The ledger's findings, stats and request -> tenant map so far (copies).
  // Thread-safe.
  std::vector<LedgerFinding> findings() const;
  LedgerStats stats() const;
  absl::flat_hash_map<uint64_t, uint32_t> request_tenants() const;
  const std::string& url() const { return url_; }

 private:
  static size_t OnData(char* data, size_t size, size_t n, void* self);
  static size_t OnHeader(char* data, size_t size, size_t n, void* self);
  static int OnProgress(void* self, long, long, long, long);
  void Run();

  const std::string url_;
  const std::string token_;
  const tls::Files tls_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  long http_status_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  TraceLineReader reader_;  // follower thread only
  ShadowLedger ledger_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TRACE_FOLLOWER_H_
