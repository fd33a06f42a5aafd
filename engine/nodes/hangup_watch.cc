#include "engine/nodes/hangup_watch.h"

#include <utility>

namespace kvcanary::engine {

HangupWatch::HangupWatch(absl::Duration interval) : interval_(interval) {
  thread_ = std::thread([this] { Loop(); });
}

HangupWatch::~HangupWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

HangupWatch::Scope HangupWatch::Watch(std::function<bool()> gone,
                                      std::function<void()> on_gone) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  if (gone) entries_[id] = Entry{std::move(gone), std::move(on_gone)};
  return Scope(this, id);
}

HangupWatch::Scope::~Scope() {
  absl::MutexLock lock(&watch_->mu_);
  watch_->entries_.erase(id_);
}

bool HangupWatch::Scope::fired() const {
  absl::MutexLock lock(&watch_->mu_);
  auto it = watch_->entries_.find(id_);
  return it != watch_->entries_.end() && it->second.fired;
}

void HangupWatch::Loop() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) {
    // Under the lock: a Scope being destroyed waits for its callback.
    for (auto& [id, e] : entries_) {
      if (e.fired || !e.gone()) continue;
      e.fired = true;
      if (e.on_gone) e.on_gone();
    }
  }
}

}  // namespace kvcanary::engine
