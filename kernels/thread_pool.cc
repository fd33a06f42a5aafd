#include "kernels/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <chrono>

#include "common/check.h"

namespace kvcanary::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Workers wait this long for the next region, spinning, before they sleep:
// long enough to cover the gaps of a decode step (sampling a batch,
// scheduling; waking a sleeping worker costs tens to hundreds of
// microseconds on a VM), short enough not to burn a core while the engine
// is idle.
constexpr auto kWorkerSpinTime = std::chrono::microseconds(1000);
// The caller waits for the workers' chunks spinning this long, then yields
// its core between looks: a worker that shares the caller's core (a loaded
// machine) then gets to run.
constexpr auto kCallerSpinTime = std::chrono::microseconds(50);

// Spins until done(); from `yield_after` on, yields between looks; returns
// false if `limit` passed first.
template <typename Done>
bool SpinUntil(const Done& done, std::chrono::nanoseconds yield_after,
               std::chrono::nanoseconds limit) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int spin = 1;; ++spin) {
    if (done()) return true;
    if (spin % 64 != 0) {
      CpuRelax();
      continue;
    }
    const auto waited = Clock::now() - start;
    if (waited >= limit) return done();
    if (waited >= yield_after) std::this_thread::yield();
  }
}

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
  SpinUntil([&] { return pending_.load(std::memory_order_acquire) == 0; },
            kCallerSpinTime, std::chrono::nanoseconds::max());
  job_ = nullptr;
}

void ThreadPool::WorkerLoop(int index) {
  // The epoch at construction, not at thread start: a region may be forked
  // before this thread first runs, and it must not be missed.
  uint64_t seen = 0;
  while (true) {
    uint64_t now = seen;
    SpinUntil(
        [&] {
          now = epoch_.load(std::memory_order_acquire);
          return now != seen;
        },
        kWorkerSpinTime, kWorkerSpinTime);
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
