// Runs the llama forward pass over a batch of query rows from many
// sequences at once: each weight matrix read once per step for many rows
// (kernels/weight_matrix.h), attention per sequence through its block table
// with the watermark check inside the kernel. A step whose sequences can be
// shared out evenly (decoding) is split by sequences: each thread runs every
// layer for its own rows and their attention, one fork per layer, and the
// engine thread writes the layer's K/V between forks. Otherwise (a long
// prefill, one sequence) the matmuls are split along output rows.
//
// Not thread-safe; owned by the engine thread (it drives the thread pool;
// inside Run the pool's threads touch disjoint rows and entries only).
#ifndef KVCANARY_ENGINE_MODEL_MODEL_RUNNER_H_
#define KVCANARY_ENGINE_MODEL_MODEL_RUNNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/page_stamp.h"
#include "engine/core/page_pool.h"
#include "engine/core/scheduler.h"
#include "engine/model/model.h"
#include "kernels/thread_pool.h"
#include "kernels/weight_matrix.h"

namespace kvcanary::engine {

// The matmuls' arithmetic (--numerics, docs/exactness.md). kInvariant:
// every output the same in any batch (kernels/cpu_kernels.h's contract).
// kVariant: a healthy GPU server's behaviour, reductions split by the
// step's sequence count (kernels/split_k_matmul.h): bitwise the same for a
// given batch shape and across --threads, different between shapes.
enum class Numerics { kInvariant, kVariant };
const char* NumericsName(Numerics n);  // "invariant" or "variant"
absl::StatusOr<Numerics> ParseNumerics(absl::string_view name);
// kVariant's split count of a step with `sequences` sequences: 1 -> 1,
// 2-3 -> 2, 4-7 -> 4, 8 or more -> 8.
int VariantSplits(int sequences);

struct ModelRunnerOptions {
  WatermarkMode watermark = WatermarkMode::kEnforce;
  TraceBus* trace = nullptr;  // page_write / page_read events; may be null
  // The no-scrub-reuse fault's read: a decode step attends over its whole
  // last page, past the slots the request has written.
  bool read_whole_last_page = false;
  Numerics numerics = Numerics::kInvariant;
};

// A model's matrices, prepared for the batched matmul (kernels::Matmul).
struct LayerMatrices {
  kernels::WeightMatrix wq, wk, wv, wo, w1, w2, w3;
};
struct ModelMatrices {
  std::vector<LayerMatrices> layers;  // (n_layers)
  kernels::WeightMatrix classifier;   // (vocab, dim)
};
// The matrices of every layer and the classifier, in `model`'s weights
// (which must outlive them).
ModelMatrices PrepareMatrices(const Model& model);

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
  // y = x · Wᵀ for `rows` rows in the runner's numerics (the step's split
  // count under kVariant); `pool` may be null.
  void Mm(const kernels::WeightMatrix& w, const float* x, float* y, int rows,
          kernels::ThreadPool* pool) const;
  void EnsureCapacity(int rows, int entries);
  // Embeds every entry's query tokens into x_, row by row in entry order;
  // fills entry_row_ and positions_.
  void EmbedRows(const Batch& batch);
  // Rows [r0, r1) of layer l: attention norm, Q/K/V, RoPE. Matmuls split
  // across `pool` when it is not null; the rest runs on the calling thread.
  void QkvRows(int l, int r0, int r1, kernels::ThreadPool* pool);
  // Every row's K/V of layer l into its page, stamped by its sequence. On
  // the engine thread, before any attention of the layer reads a page.
  void WriteKv(const Batch& batch, int l);
  // Entry e's paged attention over layer `layer`, with the watermark check.
  void AttendEntry(const Batch& batch, int layer, int e);
  // Every entry's attention; across the pool when the work pays for it.
  void Attention(const Batch& batch, int layer);
  // Rows [r0, r1) of layer l after attention: output projection and
  // residual, feed-forward norm, W1/W3, SwiGLU, W2 and residual.
  void OutputAndFeedForwardRows(int l, int r0, int r1,
                                kernels::ThreadPool* pool);
  // For each prefill entry whose sequence asks for prompt log-probabilities,
  // those of its prompt's tokens after the first into out->prompt_logprobs.
  void PromptLogprobs(const Batch& batch, StepOutput* out);
  // Final norm of the last row of entries [e0, e1) into last_.
  void FinalNorm(const Batch& batch, int e0, int e1);
  // Whether the step can be split by sequences: contiguous runs of entries
  // of about equal cost, one per thread, into split_.
  bool SplitBySequence(const Batch& batch);
  // The layers with each thread running whole layers for its own entries
  // (one fork per layer, K/V written on the engine thread between).
  void RunLayersBySequence(const Batch& batch);
  // The layers with every matmul split across the threads along its output
  // rows (a long prefill, a single sequence).
  void RunLayersShared(const Batch& batch);
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
  ModelMatrices matrices_;
  double layer_row_macs_ = 0;  // multiply-adds of one row through a layer
  int min_rows_per_part_ = 1;  // rows per thread for a split by sequences
  int splits_ = 1;             // kVariant: this step's split count

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
  std::vector<int> entry_row_;  // (entries + 1) first row of each entry
  std::vector<int> positions_;  // (rows) position of each row
  std::vector<char> refused_;   // (entries) attention refused (enforce)
  std::vector<int> split_;      // (threads + 1) first entry of each part
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_MODEL_MODEL_RUNNER_H_
