// The decode node's memory of the requests it accepted: a router resends a
// request when a kept connection closes before any answer (DecodeStream),
// which a node that is stopping may already have read; the node runs a
// request id once within `window` (10 minutes), and a duplicate gets 409
// and no work (docs/nodes.md, "Keep-alive connections to the decode
// nodes"). Ids older than the window, or past `max_ids` (the oldest first),
// are forgotten.
//
// Thread-safe.
#ifndef KVCANARY_ENGINE_NODES_ACCEPTED_REQUESTS_H_
#define KVCANARY_ENGINE_NODES_ACCEPTED_REQUESTS_H_

#include <cstddef>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/ids.h"

namespace kvcanary::engine {

class AcceptedRequests {
 public:
  static constexpr absl::Duration kDefaultWindow = absl::Minutes(10);
  // About 64 MiB at most: far above 10 minutes of any rate this node runs.
  static constexpr size_t kDefaultMaxIds = size_t{1} << 20;

  explicit AcceptedRequests(absl::Duration window = kDefaultWindow,
                            size_t max_ids = kDefaultMaxIds);

  // True, and `id` remembered, unless it was accepted within the window
  // before `now`. REQUIRES: `now` never goes back between calls.
  bool Accept(RequestId id, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Ids remembered.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Forget(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration window_;
  const size_t max_ids_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<uint64_t> ids_ ABSL_GUARDED_BY(mu_);
  // (accepted at, id), oldest first.
  std::deque<std::pair<absl::Time, uint64_t>> order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_ACCEPTED_REQUESTS_H_
