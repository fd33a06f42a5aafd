#include "engine/core/model_runner.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "kernels/cpu_kernels.h"
#include "kernels/paged_attention.h"

namespace kvcanary::engine {
namespace {

// Attention multiply-adds below which the step's attention stays on the
// calling thread (see kernels::ThreadPool).
constexpr long kParallelAttentionMinWork = 1L << 16;

void Linear(kernels::ThreadPool* threads, const float* w, const float* x,
            float* y, int n, int d, int rows) {
  kernels::MatmulArgs args;
  args.w = w;
  args.x = x;
  args.y = y;
  args.n = n;
  args.d = d;
  args.batch = rows;
  kernels::Matmul(args, threads);
}

}  // namespace

ModelRunner::ModelRunner(const Model* model, PagePool* pool,
                         kernels::ThreadPool* threads,
                         const ModelRunnerOptions& options)
    : model_(model),
      cfg_(model->config),
      pool_(pool),
      threads_(threads),
      options_(options),
      rope_(kernels::MakeRopeTable(cfg_.head_dim(), cfg_.seq_len)) {
  CHECK_EQ(pool->n_layers(), cfg_.n_layers);
  CHECK_EQ(pool->layout().kv_heads, cfg_.n_kv_heads);
  CHECK_EQ(pool->layout().head_dim, cfg_.head_dim());
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
}

int ModelRunner::AttendedTokens(const BatchEntry& entry) const {
  const int end = entry.first_pos + entry.num_tokens;
  if (!options_.read_whole_last_page || entry.num_tokens != 1) return end;
  const int pt = pool_->page_tokens();
  const int capacity = std::min(
      cfg_.seq_len, static_cast<int>(entry.seq->block_table.size()) * pt);
  return std::min(capacity, (end + pt - 1) / pt * pt);
}

void ModelRunner::Attention(const Batch& batch, int layer,
                            std::vector<bool>* refused) {
  const int dim = cfg_.dim;
  auto run_entries = [&](int e0, int e1) {
    for (int e = e0; e < e1; ++e) {
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
      a.mode = (*refused)[e] ? WatermarkMode::kOff : options_.watermark;
      a.reader_tenant = entry.seq->tenant;
      a.reader_request = entry.seq->id;
      a.violations = &entry.seq->violations;
      if (!kernels::PagedAttention(a)) (*refused)[e] = true;
    }
  };
  long work = 0;
  for (const BatchEntry& e : batch.entries) {
    work +=
        static_cast<long>(e.num_tokens) * (e.first_pos + e.num_tokens) * dim;
  }
  const int n = static_cast<int>(batch.entries.size());
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

void ModelRunner::EmbedRows(const Batch& batch, std::vector<int>* positions) {
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
      (*positions)[row] = pos;
      std::memcpy(x_.data() + static_cast<size_t>(row) * dim,
                  w.token_embedding.data() + static_cast<size_t>(token) * dim,
                  dim * sizeof(float));
    }
  }
}

void ModelRunner::AttentionBlock(const Batch& batch, int l,
                                 const std::vector<int>& positions,
                                 std::vector<bool>* refused) {
  const int rows = batch.num_rows();
  const int dim = cfg_.dim, kv_dim = cfg_.kv_dim();
  const int head_dim = cfg_.head_dim();
  const ModelWeights& w = model_->weights;
  const int pt = pool_->page_tokens();
  const size_t ld = static_cast<size_t>(l) * dim;
  for (int r = 0; r < rows; ++r) {
    kernels::RmsNorm(xb_.data() + r * dim, x_.data() + r * dim,
                     w.rms_att.data() + ld, dim);
  }
  Linear(threads_, w.wq.data() + ld * dim, xb_.data(), q_.data(), dim, dim,
         rows);
  Linear(threads_, w.wk.data() + ld * kv_dim, xb_.data(), k_.data(), dim,
         kv_dim, rows);
  Linear(threads_, w.wv.data() + ld * kv_dim, xb_.data(), v_.data(), dim,
         kv_dim, rows);
  // RoPE, then K/V into the pages, stamped by this sequence.
  char* layer_base = pool_->layer_base(l);
  for (size_t e = 0; e < batch.entries.size(); ++e) {
    Sequence& seq = *batch.entries[e].seq;
    for (int i = 0; i < batch.entries[e].num_tokens; ++i) {
      const int r = entry_row_[e] + i;
      const int pos = positions[r];
      kernels::RopeFromTable(
          q_.data() + r * dim, k_.data() + r * kv_dim, dim, kv_dim, head_dim,
          rope_.data() + static_cast<size_t>(pos) * head_dim);
      const PageRef ref = seq.block_table[pos / pt];
      kernels::WriteKvRow(layer_base, pool_->layout(), ref, pos % pt,
                          k_.data() + r * kv_dim, v_.data() + r * kv_dim,
                          StampIdentity{seq.id, seq.tenant, ref.generation},
                          static_cast<uint32_t>(l), &seq.violations);
    }
  }
  Attention(batch, l, refused);
  Linear(threads_, w.wo.data() + ld * dim, att_.data(), xb2_.data(), dim, dim,
         rows);
  kernels::AddInPlace(x_.data(), xb2_.data(), rows * dim);
}

void ModelRunner::FeedForwardBlock(int l, int rows) {
  const int dim = cfg_.dim, hidden = cfg_.hidden_dim;
  const ModelWeights& w = model_->weights;
  const size_t ld = static_cast<size_t>(l) * dim;
  for (int r = 0; r < rows; ++r) {
    kernels::RmsNorm(xb_.data() + r * dim, x_.data() + r * dim,
                     w.rms_ffn.data() + ld, dim);
  }
  const size_t lh = static_cast<size_t>(l) * hidden * dim;
  Linear(threads_, w.w1.data() + lh, xb_.data(), hb_.data(), dim, hidden, rows);
  Linear(threads_, w.w3.data() + lh, xb_.data(), hb2_.data(), dim, hidden,
         rows);
  kernels::SwiGlu(hb_.data(), hb2_.data(), rows * hidden);
  Linear(threads_, w.w2.data() + lh, hb_.data(), xb_.data(), hidden, dim, rows);
  kernels::AddInPlace(x_.data(), xb_.data(), rows * dim);
}

StepOutput ModelRunner::Run(const Batch& batch) {
  const int rows = batch.num_rows();
  const int entries = static_cast<int>(batch.entries.size());
  const int dim = cfg_.dim;
  const ModelWeights& w = model_->weights;
  EnsureCapacity(rows, entries);

  // Rows: each entry's query tokens, in order.
  entry_row_.resize(entries);
  std::vector<int> positions(rows);
  EmbedRows(batch, &positions);
  std::vector<bool> refused(entries, false);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    AttentionBlock(batch, l, positions, &refused);
    FeedForwardBlock(l, rows);
  }

  // Logits only for the last row of each entry.
  for (int e = 0; e < entries; ++e) {
    const int r = entry_row_[e] + batch.entries[e].num_tokens - 1;
    kernels::RmsNorm(last_.data() + static_cast<size_t>(e) * dim,
                     x_.data() + static_cast<size_t>(r) * dim,
                     w.rms_final.data(), dim);
  }
  if (options_.trace != nullptr && options_.trace->has_readers())
    TraceStep(batch);
  StepOutput out;
  out.logits.resize(static_cast<size_t>(entries) * cfg_.vocab_size);
  Linear(threads_, w.classifier(), last_.data(), out.logits.data(), dim,
         cfg_.vocab_size, entries);
  out.refused = std::move(refused);
  return out;
}

}  // namespace kvcanary::engine
