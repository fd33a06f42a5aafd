#include "kernels/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "common/check.h"

namespace kvcanary::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Workers spin this many rounds for the next region before sleeping: long
// enough to cover the gap between two matmuls of one forward pass, short
// enough not to burn a core while the engine is idle.
constexpr int kSpinRounds = 1 << 14;

inline void Chunk(int n, int parts, int index, int* begin, int* end) {
  const int base = n / parts, extra = n % parts;
  *begin = index * base + (index < extra ? index : extra);
  *end = *begin + base + (index < extra ? 1 : 0);
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  CHECK_GE(num_threads, 1);
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_.store(true);
    epoch_.fetch_add(1);
  }
  wake_.SignalAll();
  for (auto& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int n, const std::function<void(int, int)>& fn) {
  const int parts = num_threads();
  if (parts == 1 || n <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  pending_.store(parts - 1, std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  wake_.SignalAll();
  int begin, end;
  Chunk(n, parts, 0, &begin, &end);
  if (begin < end) fn(begin, end);
  while (pending_.load(std::memory_order_acquire) != 0) CpuRelax();
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  // The epoch at construction, not at thread start: a region may be forked
  // before this thread first runs, and it must not be missed.
  uint64_t seen = 0;
  while (true) {
    uint64_t now = seen;
    for (int spin = 0; spin < kSpinRounds; ++spin) {
      now = epoch_.load(std::memory_order_acquire);
      if (now != seen) break;
      CpuRelax();
    }
    if (now == seen) {
      absl::MutexLock lock(&mu_);
      while (epoch_.load(std::memory_order_acquire) == seen) wake_.Wait(&mu_);
      now = epoch_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load()) return;
    int begin, end;
    Chunk(job_n_, num_threads(), index, &begin, &end);
    if (begin < end) (*job_)(begin, end);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace kvcanary::kernels
