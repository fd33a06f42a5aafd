// The flags of kvcanary-bench-detect (defined in detect_bench.cc) that its
// other files read: the engine's model for `up`, the campaigns'
// duration and API.
#ifndef KVCANARY_BENCH_DETECT_FLAGS_H_
#define KVCANARY_BENCH_DETECT_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int, duration);
ABSL_DECLARE_FLAG(std::string, api);
ABSL_DECLARE_FLAG(std::string, numerics);
ABSL_DECLARE_FLAG(std::string, bin_dir);
ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, tokenizer);

#endif  // KVCANARY_BENCH_DETECT_FLAGS_H_
