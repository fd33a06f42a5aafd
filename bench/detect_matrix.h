// The configurations kvcanary-bench-detect runs its campaigns against
// (docs/detection.md): healthy quiet and under a swinging load, the global
// prefix cache, each fault with watermarks off, detect and enforce, and the
// salt configurations; each with the modes its campaigns are run in.
#ifndef KVCANARY_BENCH_DETECT_MATRIX_H_
#define KVCANARY_BENCH_DETECT_MATRIX_H_

#include <string>
#include <vector>

namespace kvcanary::bench {

// One engine configuration of the matrix.
struct Config {
  std::string name;
  std::vector<std::string> flags;  // for `up`
  bool healthy = false;            // any finding is a false alarm
  bool swinging_load = false;
  std::vector<std::string> modes;  // blackbox, trace, kv_events, salts
  // salts: cache-audit --evict-tokens (the pool's size in tokens where a
  // host tier is on); 0 none.
  int evict_tokens = 0;
};

// The whole matrix, or with `quick` a small one (healthy quiet and under
// the swinging load, one fault).
std::vector<Config> Matrix(bool quick);

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_DETECT_MATRIX_H_
