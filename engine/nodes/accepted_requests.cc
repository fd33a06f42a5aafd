// The decode node's accepted request ids (engine/nodes/accepted_requests.h).
#include "engine/nodes/accepted_requests.h"

namespace kvcanary::engine {

AcceptedRequests::AcceptedRequests(absl::Duration window, size_t max_ids)
    : window_(window), max_ids_(max_ids) {}

bool AcceptedRequests::Accept(RequestId id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  Forget(now);
  if (!ids_.insert(id.value()).second) return false;
  order_.emplace_back(now, id.value());
  if (order_.size() > max_ids_) {
    ids_.erase(order_.front().second);
    order_.pop_front();
  }
  return true;
}

size_t AcceptedRequests::size() const {
  absl::MutexLock lock(&mu_);
  return ids_.size();
}

void AcceptedRequests::Forget(absl::Time now) {
  while (!order_.empty() && now - order_.front().first >= window_) {
    ids_.erase(order_.front().second);
    order_.pop_front();
  }
}

}  // namespace kvcanary::engine
