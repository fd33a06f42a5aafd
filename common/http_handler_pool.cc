#include "common/http_handler_pool.h"

#include <algorithm>
#include <utility>

namespace kvcanary::http::internal {
namespace {

thread_local bool on_pool_thread = false;

}  // namespace

HandlerPool::HandlerPool(int max_threads)
    : max_threads_(std::max(1, max_threads)) {}

HandlerPool::~HandlerPool() { Stop(); }

bool HandlerPool::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return false;
  queue_.push_back(std::move(task));
  // Every queued task beyond the idle threads wants a thread of its own.
  if (static_cast<int>(queue_.size()) > idle_ &&
      static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] { Work(); });
  }
  return true;
}

void HandlerPool::Stop() {
  std::deque<std::function<void()>> dropped;
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    dropped.swap(queue_);
    threads.swap(threads_);
  }
  dropped.clear();  // outside the lock: a task's captures may take locks
  for (std::thread& t : threads) t.join();
}

int HandlerPool::threads() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(threads_.size());
}

bool HandlerPool::OnPoolThread() { return on_pool_thread; }

void HandlerPool::Work() {
  on_pool_thread = true;
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopped_ || !queue_.empty();
  };
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      mu_.Await(absl::Condition(&ready));
      --idle_;
      if (stopped_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
    task = nullptr;  // its captures go before the lock is taken again
  }
}

}  // namespace kvcanary::http::internal
