// Stop strings matched in generated text as it arrives, the text that may
// yet begin one held back.
#include "engine/nodes/stop_matcher.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"

namespace kvcanary::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops)
    : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) CHECK(!stop.empty());
}

StopMatcher::Emit StopMatcher::Feed(absl::string_view text) {
  if (stopped_) return {"", true};
  pending_.append(text.data(), text.size());
  // The match that ends first; of those ending at the same byte, the one
  // starting first. Emitted text never holds the start of a match, so
  // searching pending_ alone is enough.
  size_t best_start = std::string::npos, best_end = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t start = pending_.find(stop);
    if (start == std::string::npos) continue;
    const size_t end = start + stop.size();
    if (end < best_end || (end == best_end && start < best_start)) {
      best_start = start;
      best_end = end;
    }
  }
  if (best_start != std::string::npos) {
    stopped_ = true;
    Emit emit{pending_.substr(0, best_start), true};
    pending_.clear();
    return emit;
  }
  // Hold back the longest suffix that is a proper prefix of a stop.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  Emit emit{pending_.substr(0, pending_.size() - hold), false};
  pending_.erase(0, pending_.size() - hold);
  return emit;
}

std::string StopMatcher::Flush() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace kvcanary::engine
