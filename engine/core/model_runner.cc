#include "engine/core/model_runner.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "kernels/cpu_kernels.h"
#include "kernels/paged_attention.h"
#include "kernels/split_k_matmul.h"

namespace kvcanary::engine {
namespace {

// Attention multiply-adds below which the step's attention stays on the
// calling thread (see kernels::ThreadPool).
constexpr long kParallelAttentionMinWork = 1L << 16;

// A step is split by sequences only when each thread's share of the cost
// (rows through the matrices, attention) is within this factor of an even
// share; otherwise (a long prefill) the matrices are split instead.
constexpr double kMaxSplitImbalance = 1.25;
// A layer's matrices up to this size stay in a core's cache between steps.
constexpr double kCachedLayerBytes = 1 << 20;
// What an attention multiply-add costs in matmul multiply-adds: it reads a
// sequence's K/V from memory (measured: 9x on stories260K, 20x on the 15M
// shape, 32 sequences decoding).
constexpr double kAttentionCostPerMac = 8.0;

}  // namespace

const char* NumericsName(Numerics n) {
  return n == Numerics::kVariant ? "variant" : "invariant";
}

absl::StatusOr<Numerics> ParseNumerics(absl::string_view name) {
  if (name == "invariant") return Numerics::kInvariant;
  if (name == "variant") return Numerics::kVariant;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown numerics '", name, "' (want invariant or variant)"));
}

int VariantSplits(int sequences) {
  if (sequences >= 8) return 8;
  if (sequences >= 4) return 4;
  return sequences >= 2 ? 2 : 1;
}

ModelMatrices PrepareMatrices(const Model& model) {
  const ModelConfig& c = model.config;
  const ModelWeights& w = model.weights;
  const int dim = c.dim, kv_dim = c.kv_dim(), hidden = c.hidden_dim;
  ModelMatrices m;
  for (int l = 0; l < c.n_layers; ++l) {
    const size_t ld = static_cast<size_t>(l) * dim;
    const size_t lh = static_cast<size_t>(l) * hidden * dim;
    m.layers.push_back(LayerMatrices{{w.wq.data() + ld * dim, dim, dim},
                                     {w.wk.data() + ld * kv_dim, dim, kv_dim},
                                     {w.wv.data() + ld * kv_dim, dim, kv_dim},
                                     {w.wo.data() + ld * dim, dim, dim},
                                     {w.w1.data() + lh, dim, hidden},
                                     {w.w2.data() + lh, hidden, dim},
                                     {w.w3.data() + lh, dim, hidden}});
  }
  m.classifier = kernels::WeightMatrix(w.classifier(), dim, c.vocab_size);
  return m;
}

ModelRunner::ModelRunner(const Model* model, PagePool* pool,
                         kernels::ThreadPool* threads,
                         const ModelRunnerOptions& options)
    : model_(model),
      cfg_(model->config),
      pool_(pool),
      threads_(threads),
      options_(options),
      rope_(kernels::MakeRopeTable(cfg_.head_dim(), cfg_.seq_len)),
      matrices_(PrepareMatrices(*model)) {
  CHECK_EQ(pool->n_layers(), cfg_.n_layers);
  CHECK_EQ(pool->layout().kv_heads, cfg_.n_kv_heads);
  CHECK_EQ(pool->layout().head_dim, cfg_.head_dim());
  const int dim = cfg_.dim, kv_dim = cfg_.kv_dim(), hidden = cfg_.hidden_dim;
  layer_row_macs_ = dim * (2.0 * dim + 2.0 * kv_dim + 3.0 * hidden);
  // Splitting by sequences has every thread read every matrix: for a model
  // whose layers do not stay in cache, only worth it with rows enough per
  // thread to turn the weight stream into compute.
  const double layer_bytes = sizeof(float) * layer_row_macs_;
  min_rows_per_part_ = layer_bytes <= kCachedLayerBytes ? 1 : 8;
}

void ModelRunner::Mm(const kernels::WeightMatrix& w, const float* x, float* y,
                     int rows, kernels::ThreadPool* pool) const {
  if (options_.numerics == Numerics::kVariant) {
    kernels::SplitKMatmul(w, x, y, rows, splits_, pool);
  } else {
    kernels::Matmul(w, x, y, rows, pool);
  }
}

void ModelRunner::EnsureCapacity(int rows, int entries) {
  const size_t r = rows;
  auto grow = [](std::vector<float>& v, size_t n) {
    if (v.size() < n) v.resize(n);
  };
  grow(x_, r * cfg_.dim);
  grow(xb_, r * cfg_.dim);
  grow(xb2_, r * cfg_.dim);
  grow(q_, r * cfg_.dim);
  grow(k_, r * cfg_.kv_dim());
  grow(v_, r * cfg_.kv_dim());
  grow(att_, r * cfg_.dim);
  grow(hb_, r * cfg_.hidden_dim);
  grow(hb2_, r * cfg_.hidden_dim);
  grow(last_, static_cast<size_t>(entries) * cfg_.dim);
  if (positions_.size() < r) positions_.resize(r);
  if (entry_row_.size() < static_cast<size_t>(entries) + 1)
    entry_row_.resize(entries + 1);
}

int ModelRunner::AttendedTokens(const BatchEntry& entry) const {
  const int end = entry.first_pos + entry.num_tokens;
  if (!options_.read_whole_last_page || entry.num_tokens != 1) return end;
  const int pt = pool_->page_tokens();
  const int capacity = std::min(
      cfg_.seq_len, static_cast<int>(entry.seq->block_table.size()) * pt);
  return std::min(capacity, (end + pt - 1) / pt * pt);
}

void ModelRunner::AttendEntry(const Batch& batch, int layer, int e) {
  const int dim = cfg_.dim;
  const BatchEntry& entry = batch.entries[e];
  const int row = entry_row_[e];
  kernels::PagedAttentionArgs a;
  a.q = q_.data() + static_cast<size_t>(row) * dim;
  a.out = att_.data() + static_cast<size_t>(row) * dim;
  // The query at first_pos + i attends to tokens [0, first_pos + i];
  // under no-scrub-reuse a decode query reads to its page's end.
  a.first_pos = AttendedTokens(entry) - entry.num_tokens;
  a.num_queries = entry.num_tokens;
  a.n_heads = cfg_.n_heads;
  a.n_kv_heads = cfg_.n_kv_heads;
  a.head_dim = cfg_.head_dim();
  a.layer_base = pool_->layer_base(layer);
  a.layout = pool_->layout();
  a.block_table = entry.seq->block_table.data();
  a.num_block_pages = static_cast<int>(entry.seq->block_table.size());
  a.layer = static_cast<uint32_t>(layer);
  // An entry already refused in an earlier layer is not checked again.
  a.mode = refused_[e] ? WatermarkMode::kOff : options_.watermark;
  a.reader_tenant = entry.seq->tenant;
  a.reader_request = entry.seq->id;
  a.violations = &entry.seq->violations;
  if (!kernels::PagedAttention(a)) refused_[e] = 1;
}

void ModelRunner::Attention(const Batch& batch, int layer) {
  long work = 0;
  for (const BatchEntry& e : batch.entries) {
    work += static_cast<long>(e.num_tokens) * (e.first_pos + e.num_tokens) *
            cfg_.dim;
  }
  const int n = static_cast<int>(batch.entries.size());
  auto run_entries = [&](int e0, int e1) {
    for (int e = e0; e < e1; ++e) AttendEntry(batch, layer, e);
  };
  if (threads_ == nullptr || threads_->num_threads() == 1 ||
      work < kParallelAttentionMinWork) {
    run_entries(0, n);
  } else {
    threads_->ParallelFor(n, run_entries);
  }
}

void ModelRunner::TraceStep(const Batch& batch) {
  const int pt = pool_->page_tokens();
  for (const BatchEntry& entry : batch.entries) {
    const Sequence& seq = *entry.seq;
    // Writes: the slots this step wrote, one event per page.
    const int end = entry.first_pos + entry.num_tokens;
    for (int pos = entry.first_pos; pos < end;) {
      const int page_index = pos / pt;
      const int page_end = std::min(end, (page_index + 1) * pt);
      const PageRef ref = seq.block_table[page_index];
      TraceEvent e;
      e.type = TraceEventType::kPageWrite;
      e.page = ref.page;
      e.gen = ref.generation;
      e.tenant = seq.tenant;
      e.request = seq.id;
      e.first_slot = static_cast<uint32_t>(pos % pt);
      e.last_slot_exclusive = static_cast<uint32_t>(page_end - page_index * pt);
      e.writer_gen = ref.generation;
      options_.trace->Emit(e);
      pos = page_end;
    }
    // Reads: every page attention read, for sampled requests.
    if (!options_.trace->SampleReads(seq.id)) continue;
    const int read_end = AttendedTokens(entry);
    for (int p = 0; p * pt < read_end; ++p) {
      const PageRef ref = seq.block_table[p];
      TraceEvent e;
      e.type = TraceEventType::kPageRead;
      e.request = seq.id;
      e.tenant = seq.tenant;
      e.page = ref.page;
      e.gen = ref.generation;
      e.slots = static_cast<uint32_t>(std::min(pt, read_end - p * pt));
      options_.trace->Emit(e);
    }
  }
}

void ModelRunner::EmbedRows(const Batch& batch) {
  const int dim = cfg_.dim;
  const ModelWeights& w = model_->weights;
  int row = 0;
  for (size_t e = 0; e < batch.entries.size(); ++e) {
    const BatchEntry& entry = batch.entries[e];
    const Sequence& seq = *entry.seq;
    CHECK_LE(entry.first_pos + entry.num_tokens, cfg_.seq_len);
    entry_row_[e] = row;
    for (int i = 0; i < entry.num_tokens; ++i, ++row) {
      const int pos = entry.first_pos + i;
      const int p = static_cast<int>(seq.prompt.size());
      const int token = pos < p ? seq.prompt[pos] : seq.output[pos - p];
      CHECK(token >= 0 && token < cfg_.vocab_size);
      positions_[row] = pos;
      std::memcpy(x_.data() + static_cast<size_t>(row) * dim,
                  w.token_embedding.data() + static_cast<size_t>(token) * dim,
                  dim * sizeof(float));
    }
  }
  entry_row_[batch.entries.size()] = row;
}

void ModelRunner::QkvRows(int l, int r0, int r1, kernels::ThreadPool* pool) {
  const int dim = cfg_.dim, kv_dim = cfg_.kv_dim();
  const int head_dim = cfg_.head_dim();
  const float* rms =
      model_->weights.rms_att.data() + static_cast<size_t>(l) * dim;
  for (int r = r0; r < r1; ++r) {
    kernels::RmsNorm(xb_.data() + static_cast<size_t>(r) * dim,
                     x_.data() + static_cast<size_t>(r) * dim, rms, dim);
  }
  const LayerMatrices& m = matrices_.layers[l];
  const float* xb = xb_.data() + static_cast<size_t>(r0) * dim;
  float* q = q_.data() + static_cast<size_t>(r0) * dim;
  float* k = k_.data() + static_cast<size_t>(r0) * kv_dim;
  Mm(m.wq, xb, q, r1 - r0, pool);
  Mm(m.wk, xb, k, r1 - r0, pool);
  Mm(m.wv, xb, v_.data() + static_cast<size_t>(r0) * kv_dim, r1 - r0, pool);
  for (int r = r0; r < r1; ++r, q += dim, k += kv_dim) {
    kernels::RopeFromTable(
        q, k, dim, kv_dim, head_dim,
        rope_.data() + static_cast<size_t>(positions_[r]) * head_dim);
  }
}

void ModelRunner::WriteKv(const Batch& batch, int l) {
  const int kv_dim = cfg_.kv_dim();
  const int pt = pool_->page_tokens();
  char* layer_base = pool_->layer_base(l);
  for (size_t e = 0; e < batch.entries.size(); ++e) {
    Sequence& seq = *batch.entries[e].seq;
    for (int r = entry_row_[e]; r < entry_row_[e + 1]; ++r) {
      const int pos = positions_[r];
      const PageRef ref = seq.block_table[pos / pt];
      kernels::WriteKvRow(layer_base, pool_->layout(), ref, pos % pt,
                          k_.data() + static_cast<size_t>(r) * kv_dim,
                          v_.data() + static_cast<size_t>(r) * kv_dim,
                          StampIdentity{seq.id, seq.tenant, ref.generation},
                          static_cast<uint32_t>(l), &seq.violations);
    }
  }
}

void ModelRunner::OutputAndFeedForwardRows(int l, int r0, int r1,
                                           kernels::ThreadPool* pool) {
  const int dim = cfg_.dim, hidden = cfg_.hidden_dim;
  const LayerMatrices& m = matrices_.layers[l];
  const int rows = r1 - r0;
  float* x = x_.data() + static_cast<size_t>(r0) * dim;
  float* xb = xb_.data() + static_cast<size_t>(r0) * dim;
  float* xb2 = xb2_.data() + static_cast<size_t>(r0) * dim;
  float* hb = hb_.data() + static_cast<size_t>(r0) * hidden;
  float* hb2 = hb2_.data() + static_cast<size_t>(r0) * hidden;
  Mm(m.wo, att_.data() + static_cast<size_t>(r0) * dim, xb2, rows, pool);
  kernels::AddInPlace(x, xb2, rows * dim);
  const float* rms =
      model_->weights.rms_ffn.data() + static_cast<size_t>(l) * dim;
  for (int r = 0; r < rows; ++r) {
    kernels::RmsNorm(xb + static_cast<size_t>(r) * dim,
                     x + static_cast<size_t>(r) * dim, rms, dim);
  }
  Mm(m.w1, xb, hb, rows, pool);
  Mm(m.w3, xb, hb2, rows, pool);
  kernels::SwiGlu(hb, hb2, rows * hidden);
  Mm(m.w2, hb, xb, rows, pool);
  kernels::AddInPlace(x, xb, rows * dim);
}

void ModelRunner::FinalNorm(const Batch& batch, int e0, int e1) {
  const int dim = cfg_.dim;
  for (int e = e0; e < e1; ++e) {
    const int r = entry_row_[e + 1] - 1;  // the entry's last row
    kernels::RmsNorm(last_.data() + static_cast<size_t>(e) * dim,
                     x_.data() + static_cast<size_t>(r) * dim,
                     model_->weights.rms_final.data(), dim);
  }
}

bool ModelRunner::SplitBySequence(const Batch& batch) {
  const int parts = threads_ == nullptr ? 1 : threads_->num_threads();
  const int n = static_cast<int>(batch.entries.size());
  if (parts < 2 || n < parts) return false;
  const int rows = entry_row_[n];
  if (rows < parts * min_rows_per_part_) return false;
  // An entry's cost in a layer: its rows through the matrices, and its
  // attention (q·k and the weighted sum of v over the tokens it attends to).
  std::vector<double> cum(n + 1, 0.0);
  for (int e = 0; e < n; ++e) {
    const BatchEntry& entry = batch.entries[e];
    const double attention =
        kAttentionCostPerMac * 2.0 * cfg_.dim * AttendedTokens(entry);
    cum[e + 1] = cum[e] + entry.num_tokens * (layer_row_macs_ + attention);
  }
  const double share = cum[n] / parts;
  split_.assign(parts + 1, n);
  split_[0] = 0;
  int e = 0;
  for (int p = 1; p < parts; ++p) {
    const double goal = p * share;
    while (e < n && cum[e + 1] <= goal) ++e;
    // Cut before or after entry e, whichever lands nearer the goal.
    if (e < n && cum[e + 1] - goal < goal - cum[e]) ++e;
    split_[p] = e;
  }
  for (int p = 0; p < parts; ++p) {
    if (split_[p] == split_[p + 1]) return false;
    if (cum[split_[p + 1]] - cum[split_[p]] > kMaxSplitImbalance * share)
      return false;
  }
  return true;
}

void ModelRunner::RunLayersBySequence(const Batch& batch) {
  const int parts = static_cast<int>(split_.size()) - 1;
  auto rows_of = [&](int p, int* r0, int* r1) {
    *r0 = entry_row_[split_[p]];
    *r1 = entry_row_[split_[p + 1]];
  };
  threads_->ParallelFor(parts, [&](int p0, int p1) {
    for (int p = p0, r0, r1; p < p1; ++p) {
      rows_of(p, &r0, &r1);
      QkvRows(0, r0, r1, nullptr);
    }
  });
  for (int l = 0; l < cfg_.n_layers; ++l) {
    WriteKv(batch, l);
    threads_->ParallelFor(parts, [&](int p0, int p1) {
      for (int p = p0, r0, r1; p < p1; ++p) {
        rows_of(p, &r0, &r1);
        for (int e = split_[p]; e < split_[p + 1]; ++e)
          AttendEntry(batch, l, e);
        OutputAndFeedForwardRows(l, r0, r1, nullptr);
        if (l + 1 < cfg_.n_layers) {
          QkvRows(l + 1, r0, r1, nullptr);
        } else {
          FinalNorm(batch, split_[p], split_[p + 1]);
        }
      }
    });
  }
}

void ModelRunner::RunLayersShared(const Batch& batch) {
  const int rows = batch.num_rows();
  for (int l = 0; l < cfg_.n_layers; ++l) {
    QkvRows(l, 0, rows, threads_);
    WriteKv(batch, l);
    Attention(batch, l);
    OutputAndFeedForwardRows(l, 0, rows, threads_);
  }
  FinalNorm(batch, 0, static_cast<int>(batch.entries.size()));
}

StepOutput ModelRunner::Run(const Batch& batch) {
  const int rows = batch.num_rows();
  const int entries = static_cast<int>(batch.entries.size());
  EnsureCapacity(rows, entries);
  EmbedRows(batch);
  refused_.assign(entries, 0);
  splits_ = VariantSplits(entries);
  if (SplitBySequence(batch)) {
    RunLayersBySequence(batch);
  } else {
    RunLayersShared(batch);
  }
  if (options_.trace != nullptr && options_.trace->has_readers())
    TraceStep(batch);
  StepOutput out;
  out.logits.resize(static_cast<size_t>(entries) * cfg_.vocab_size);
  // Logits only for the last row of each entry, split along the vocabulary.
  Mm(matrices_.classifier, last_.data(), out.logits.data(), entries, threads_);
  out.refused.assign(refused_.begin(), refused_.end());
  PromptLogprobs(batch, &out);
  return out;
}

void ModelRunner::PromptLogprobs(const Batch& batch, StepOutput* out) {
  const int dim = cfg_.dim, vocab = cfg_.vocab_size;
  // Rows at a time, so a long prompt never holds its whole logits matrix.
  constexpr int kChunkRows = 64;
  std::vector<float> normed, logits;
  out->prompt_logprobs.resize(batch.entries.size());
  for (size_t e = 0; e < batch.entries.size(); ++e) {
    const BatchEntry& entry = batch.entries[e];
    const Sequence& seq = *entry.seq;
    if (!seq.sampling.prompt_logprobs || refused_[e] ||
        seq.state.phase() != RequestPhase::kPrefilling) {
      continue;
    }
    CHECK_EQ(entry.first_pos, 0) << "prompt log-probabilities need every row";
    const int top = std::max(0, seq.sampling.logprobs);
    std::vector<TokenLogprobs>& lp = out->prompt_logprobs[e];
    // Row p's logits (through the final norm and the classifier, as the
    // last row's) predict the token at p + 1.
    for (int r0 = 0; r0 + 1 < entry.num_tokens; r0 += kChunkRows) {
      const int n = std::min(kChunkRows, entry.num_tokens - 1 - r0);
      normed.resize(static_cast<size_t>(n) * dim);
      logits.resize(static_cast<size_t>(n) * vocab);
      for (int r = 0; r < n; ++r) {
        kernels::RmsNorm(
            normed.data() + static_cast<size_t>(r) * dim,
            x_.data() + static_cast<size_t>(entry_row_[e] + r0 + r) * dim,
            model_->weights.rms_final.data(), dim);
      }
      Mm(matrices_.classifier, normed.data(), logits.data(), n, threads_);
      for (int r = 0; r < n; ++r) {
        lp.push_back(
            ComputeLogprobs(logits.data() + static_cast<size_t>(r) * vocab,
                            vocab, seq.prompt[r0 + r + 1], top));
      }
    }
  }
}

}  // namespace kvcanary::engine
