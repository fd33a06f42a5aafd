// Runs the llama forward pass over a batch of query rows from many
// sequences at once: one matmul per weight per step for the whole batch,
// attention per sequence through its block table, with the watermark check.
//
// Not thread-safe; owned by the engine thread (it drives the thread pool).
#ifndef KVCANARY_ENGINE_MODEL_MODEL_RUNNER_H_
#define KVCANARY_ENGINE_MODEL_MODEL_RUNNER_H_

#include <vector>

#include "common/page_stamp.h"
#include "engine/core/page_pool.h"
#include "engine/core/scheduler.h"
#include "engine/model/model.h"
#include "kernels/thread_pool.h"

namespace kvcanary::engine {

struct ModelRunnerOptions {
  WatermarkMode watermark = WatermarkMode::kEnforce;
  TraceBus* trace = nullptr;  // page_write / page_read events; may be null
  // The no-scrub-reuse fault's read: a decode step attends over its whole
  // last page, past the slots the request has written.
  bool read_whole_last_page = false;
};

class ModelRunner {
 public:
  // `model`, `pool` and `threads` must outlive the runner.
  ModelRunner(const Model* model, PagePool* pool, kernels::ThreadPool* threads,
              const ModelRunnerOptions& options);

  // Computes K/V of every row into the pages and the logits of each entry's
  // last row. Violations found by the watermark check are appended to the
  // entry's sequence; in kEnforce an entry with a violation is refused (its
  // attention is not computed and its logits are garbage to be ignored).
  StepOutput Run(const Batch& batch);

  WatermarkMode watermark() const { return options_.watermark; }

 private:
  void EnsureCapacity(int rows, int entries);
  // Embeds every entry's query tokens into x_, row by row in entry order;
  // fills entry_row_ and each row's position into *positions.
  void EmbedRows(const Batch& batch, std::vector<int>* positions);
  // Layer `l`'s attention block: norm, Q/K/V, RoPE, K/V written into the
  // pages stamped by their sequence, paged attention, output, residual.
  void AttentionBlock(const Batch& batch, int l,
                      const std::vector<int>& positions,
                      std::vector<bool>* refused);
  // Layer `l`'s feed-forward block over `rows` rows, with its residual.
  void FeedForwardBlock(int l, int rows);
  void Attention(const Batch& batch, int layer, std::vector<bool>* refused);
  // Tokens the entry's last query attends to (first_pos + num_tokens, or
  // more under the no-scrub-reuse fault).
  int AttendedTokens(const BatchEntry& entry) const;
  // page_write and (sampled) page_read events of one step.
  void TraceStep(const Batch& batch);

  const Model* model_;
  const ModelConfig& cfg_;
  PagePool* pool_;
  kernels::ThreadPool* threads_;
  ModelRunnerOptions options_;
  std::vector<float> rope_;  // (seq_len, head_dim): RoPE (cos, sin) pairs

  // Activations, grown on demand; rows = query rows of the step.
  std::vector<float> x_;        // (rows, dim) residual stream
  std::vector<float> xb_;       // (rows, dim)
  std::vector<float> xb2_;      // (rows, dim)
  std::vector<float> q_;        // (rows, dim)
  std::vector<float> k_;        // (rows, kv_dim)
  std::vector<float> v_;        // (rows, kv_dim)
  std::vector<float> att_;      // (rows, dim) attention output
  std::vector<float> hb_;       // (rows, hidden)
  std::vector<float> hb2_;      // (rows, hidden)
  std::vector<float> last_;     // (entries, dim) final-normed last rows
  std::vector<int> entry_row_;  // (entries) first row of each entry
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_MODEL_RUNNER_H_
