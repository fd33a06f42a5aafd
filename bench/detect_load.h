// The background load of kvcanary-bench-detect's swinging configurations:
// clients of a tenant of their own whose rate swings idle -> saturating ->
// light, so that a detector's false alarms are counted on a busy engine.
#ifndef KVCANARY_BENCH_DETECT_LOAD_H_
#define KVCANARY_BENCH_DETECT_LOAD_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace kvcanary::bench {

// Eight clients of a tenant of its own whose rate swings every 4 s: idle,
// then all eight back to back (saturating), then one with pauses (light).
class SwingingLoad {
 public:
  explicit SwingingLoad(const std::string& router);
  ~SwingingLoad();
  int64_t requests() const { return requests_; }

 private:
  void Client(const std::string& router, int i);
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> requests_{0};
  std::vector<std::thread> threads_;
};

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_DETECT_LOAD_H_
