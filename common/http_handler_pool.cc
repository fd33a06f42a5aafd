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
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;
  queue_.push_back(std::move(task));
  // Every queued task beyond the idle threads wants a thread of its own.
  if (static_cast<int>(queue_.size()) > idle_ &&
      static_cast<int>(threads_.size()) < max_threads_) {
    threads_.emplace_back([this] { Work(); });
  } else {
    wake_.notify_one();
  }
  return true;
}

void HandlerPool::Stop() {
  std::deque<std::function<void()>> dropped;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    dropped.swap(queue_);
    threads.swap(threads_);
  }
  wake_.notify_all();
  dropped.clear();  // outside the lock: a task's captures may take locks
  for (std::thread& t : threads) t.join();
}

int HandlerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

bool HandlerPool::OnPoolThread() { return on_pool_thread; }

void HandlerPool::Work() {
  on_pool_thread = true;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ++idle_;
    wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
    --idle_;
    if (stopped_) return;
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // its captures go before the lock is taken again
    lock.lock();
  }
}

}  // namespace kvcanary::http::internal
