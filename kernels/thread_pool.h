// A small fork-join pool for the kernels. A parallel region costs a few
// microseconds, more than a whole matmul of the 260K model, so callers only
// fork when the work is big enough (see kParallelMinWork in cpu_kernels.cc);
// threading must pay for itself.
//
// Thread-safety: ParallelFor may be called from one thread at a time (the
// engine thread); the pool is not re-entrant.
#ifndef KVCANARY_KERNELS_THREAD_POOL_H_
#define KVCANARY_KERNELS_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace kvcanary::kernels {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 means no workers.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n); chunk t of
  // num_threads() runs on thread t (the caller runs chunk 0). Chunking
  // depends only on n and num_threads(), never on timing. Returns when all
  // chunks are done.
  void ParallelFor(int n, const std::function<void(int, int)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  int job_n_ = 0;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // Workers that spun without a new region sleep here; the epoch is
  // atomic (the spin reads it without the lock), so no field is guarded,
  // but it only advances under mu_, so a sleeper cannot miss it.
  absl::Mutex mu_;
  absl::CondVar wake_;
};

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_THREAD_POOL_H_
