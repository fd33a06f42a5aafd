// The README demo on the single-node engine: a multi-tenant workload with
// continuous batching, a batch-invariance check, and the watermark check
// catching another tenant's bytes planted in a request's pages (detect: served
// and attributed; enforce: refused). Prints ids, counts and hashes only.
#ifndef KVCANARY_ENGINE_APP_DEMO_H_
#define KVCANARY_ENGINE_APP_DEMO_H_

#include <cstdio>

#include "absl/status/status.h"
#include "engine/model/model.h"
#include "engine/model/tokenizer.h"

namespace kvcanary::engine {

struct DemoOptions {
  int num_threads = 1;
  int tenants = 8;
  int requests_per_tenant = 4;
  int max_tokens = 48;
};

// Returns an error if the engine misbehaved (a violation in the clean run, a
// batch-invariance mismatch, a planted write not caught).
absl::Status RunDemo(const Model& model, const Tokenizer& tokenizer,
                     const DemoOptions& options, FILE* out);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_APP_DEMO_H_
