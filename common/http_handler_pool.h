// The threads that run HTTP handlers (common/http_server.h).
//
// Why an elastic pool and not a thread per request or a fixed pool: a
// handler may block for minutes streaming tokens, so it needs a thread of
// its own while it runs, but only while it runs — idle and slow connections
// live on the I/O thread and hold none. Threads are started on demand up to
// `max_threads` (so a test server costs no threads until it is used) and then
// kept; beyond the cap requests wait their turn in arrival order, as they did
// in cpp-httplib's pool, and the cap bounds memory (a stack per thread) when
// a crowd arrives. The caller sizes the cap to the streams it must hold at
// once (e.g. the router's max_in_flight).
//
// Thread-safe.
#ifndef KVCANARY_COMMON_HTTP_HANDLER_POOL_H_
#define KVCANARY_COMMON_HTTP_HANDLER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvcanary::http::internal {

class HandlerPool {
 public:
  explicit HandlerPool(int max_threads);
  ~HandlerPool();  // Stop()
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Runs `task` on a pool thread, now or after the tasks before it. False
  // (and `task` dropped) once Stop() began.
  bool Post(std::function<void()> task);
  // Drops the tasks not started yet, waits for the running ones and joins
  // every thread. Idempotent. REQUIRES: not called from a pool thread.
  void Stop();

  int threads() const;  // started so far
  // Whether the caller is a thread of some HandlerPool.
  static bool OnPoolThread();

 private:
  void Work();

  const int max_threads_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // threads waiting for a task
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvcanary::http::internal

#endif  // KVCANARY_COMMON_HTTP_HANDLER_POOL_H_
