#include "kernels/paged_attention.h"

#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/cpu_kernels.h"
#include "kernels/simd.h"

namespace kvcanary::kernels {
namespace {

// q · k over head_dim floats: 8-lane chunks, a fixed horizontal sum, then
// the scalar tail in order.
inline float Dot(const float* q, const float* k, int hd) {
  const int hd8 = hd & ~7;
  float s = 0.0f;
  if (hd8 > 0) {
    F32x8 acc = F32x8::Zero();
    for (int i = 0; i < hd8; i += 8) {
      acc = MulAdd(F32x8::Load(q + i), F32x8::Load(k + i), acc);
    }
    s = acc.HorizontalSum();
  }
  for (int i = hd8; i < hd; ++i) s += q[i] * k[i];
  return s;
}

// Dot() of q with 8 consecutive keys (kv_row floats apart), bitwise equal
// to 8 calls of Dot(), four times faster: one transposed horizontal sum.
inline void Dot8(const float* q, const float* k, size_t kv_row, int hd,
                 float* out) {
  const int hd8 = hd & ~7;
  if (hd8 == 0) {
    for (int j = 0; j < 8; ++j) out[j] = Dot(q, k + j * kv_row, hd);
    return;
  }
  F32x8 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = F32x8::Zero();
  for (int i = 0; i < hd8; i += 8) {
    const F32x8 qv = F32x8::Load(q + i);
    for (int j = 0; j < 8; ++j) {
      acc[j] = MulAdd(qv, F32x8::Load(k + j * kv_row + i), acc[j]);
    }
  }
  HorizontalSums8(acc).Store(out);
  for (int j = 0; j < 8; ++j) {
    for (int i = hd8; i < hd; ++i) out[j] += q[i] * k[j * kv_row + i];
  }
}

// Pages ahead of the one being scored whose K and V are prefetched.
constexpr int kPrefetchPages = 2;

// Asks for the cache line at p to be fetched into L2. In assembly on x86:
// GCC removed __builtin_prefetch here (a helper whose only work is to
// prefetch counts as having no effect), and a decode step over many
// sequences reads its pages 10-15% faster with the prefetches.
inline void PrefetchLine(const char* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht1 %0" : : "m"(*p));
#else
  __builtin_prefetch(p, /*rw=*/0, /*locality=*/2);
#endif
}

// One query's attention, page by page: each page's K block, then its V
// block, is read once for every head while it is in cache (a decode step
// over many sequences reads each sequence's pages from memory, and heads
// walking them one at a time each took the miss). Scratch per thread.
class QueryAttention {
 public:
  explicit QueryAttention(const PagedAttentionArgs& a)
      : a_(a),
        hd_(a.head_dim),
        hd8_(a.head_dim & ~7),
        kv_mul_(a.n_heads / a.n_kv_heads),
        kv_row_(static_cast<size_t>(a.n_kv_heads) * a.head_dim) {}

  // out (n_heads, head_dim) for q (n_heads, head_dim) attending to tokens
  // [0, n).
  void Run(const float* q, int n, float* out) {
    Workspace& w = Scratch();
    const size_t scores = static_cast<size_t>(a_.n_heads) * n;
    if (w.scores.size() < scores) w.scores.resize(scores);
    const int pt = a_.layout.page_tokens;
    for (int p = 0; p < kPrefetchPages; ++p) Prefetch(p, n);
    for (int p = 0, t = 0; t < n; ++p, t += pt) {
      ScorePage(q, p, t, n - t < pt ? n - t : pt, n, w.scores.data());
    }
    const float scale = sqrtf(static_cast<float>(hd_));
    const F32x8 scale8 = F32x8::Broadcast(scale);
    for (int h = 0; h < a_.n_heads; ++h) {
      float* att = w.scores.data() + static_cast<size_t>(h) * n;
      int t = 0;
      for (; t + 8 <= n; t += 8) (F32x8::Load(att + t) / scale8).Store(att + t);
      for (; t < n; ++t) att[t] /= scale;
      Softmax(att, n);
    }
    WeightedSums(w, n, out);
  }

 private:
  struct Workspace {
    std::vector<float> scores;  // (n_heads, n), f32
    std::vector<F32x8> acc;     // (n_heads, head_dim / 8, 4) accumulators
    std::vector<float> tail;    // (n_heads, head_dim % 8) sums
  };
  static Workspace& Scratch() {
    thread_local Workspace w;
    return w;
  }
  const float* Keys(int p) const {
    return KvPageLayout::keys(
        a_.layout.page(a_.layer_base, a_.block_table[p].page));
  }
  const float* Values(int p) const {
    return a_.layout.values(
        a_.layout.page(a_.layer_base, a_.block_table[p].page));
  }

  // Asks for page p's K and V, if the query reads the page, to be fetched
  // into the core's L2 while earlier pages are computed on: a decode step
  // over many sequences finds their pages out of cache.
  void Prefetch(int p, int n) const {
    if (p * a_.layout.page_tokens >= n) return;
    const char* block = reinterpret_cast<const char*>(Keys(p));
    const size_t bytes = 2 * a_.layout.kv_floats() * sizeof(float);
    for (size_t off = 0; off < bytes; off += 64) PrefetchLine(block + off);
  }

  // q · k of every head for the `slots` tokens of page p (tokens from t).
  void ScorePage(const float* q, int p, int t, int slots, int n,
                 float* scores) const {
    Prefetch(p + kPrefetchPages, n);
    const float* keys = Keys(p);
    for (int h = 0; h < a_.n_heads; ++h) {
      const float* qh = q + static_cast<size_t>(h) * hd_;
      const float* k = keys + static_cast<size_t>(h / kv_mul_) * hd_;
      float* att = scores + static_cast<size_t>(h) * n + t;
      int s = 0;
      for (; s + 8 <= slots; s += 8)
        Dot8(qh, k + s * kv_row_, kv_row_, hd_, att + s);
      for (; s < slots; ++s) att[s] = Dot(qh, k + s * kv_row_, hd_);
    }
  }

  // acc += att[u] * v_u for the tokens [t, end) of one page, one 8-lane
  // chunk of a head (v at the page's first slot): token u goes to
  // accumulator u % 4, by absolute position, so the sum never depends on
  // page size or batch.
  void AccumulatePage(const float* att, const float* v, int t, int end,
                      F32x8* acc) const {
    const size_t kv_row = kv_row_;
    int u = t;
    for (; u < end && (u & 3) != 0; ++u, v += kv_row) {
      acc[u & 3] = MulAdd(F32x8::Broadcast(att[u]), F32x8::Load(v), acc[u & 3]);
    }
    F32x8 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    for (; u + 4 <= end; u += 4, v += 4 * kv_row) {
      a0 = MulAdd(F32x8::Broadcast(att[u]), F32x8::Load(v), a0);
      a1 = MulAdd(F32x8::Broadcast(att[u + 1]), F32x8::Load(v + kv_row), a1);
      a2 =
          MulAdd(F32x8::Broadcast(att[u + 2]), F32x8::Load(v + 2 * kv_row), a2);
      a3 =
          MulAdd(F32x8::Broadcast(att[u + 3]), F32x8::Load(v + 3 * kv_row), a3);
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
    for (; u < end; ++u, v += kv_row) {
      acc[u & 3] = MulAdd(F32x8::Broadcast(att[u]), F32x8::Load(v), acc[u & 3]);
    }
  }

  // out = sum_t att[t] * v_t per head: 8-lane chunks with four accumulators
  // combined as (a0 + a1) + (a2 + a3), then the lanes past the last chunk
  // summed in token order.
  void WeightedSums(Workspace& w, int n, float* out) const {
    const int chunks = hd8_ / 8, rest = hd_ - hd8_;
    const size_t accs = static_cast<size_t>(a_.n_heads) * chunks * 4;
    w.acc.assign(accs, F32x8::Zero());
    w.tail.assign(static_cast<size_t>(a_.n_heads) * rest, 0.0f);
    const int pt = a_.layout.page_tokens;
    for (int p = 0, t = 0; t < n; ++p, t += pt) {
      const int end = n - t < pt ? n : t + pt;  // absolute, exclusive
      const float* values = Values(p);
      for (int h = 0; h < a_.n_heads; ++h) {
        const float* att = w.scores.data() + static_cast<size_t>(h) * n;
        const float* v = values + static_cast<size_t>(h / kv_mul_) * hd_;
        F32x8* acc = w.acc.data() + static_cast<size_t>(h) * chunks * 4;
        for (int c = 0; c < chunks; ++c)
          AccumulatePage(att, v + c * 8, t, end, acc + c * 4);
        float* tail = w.tail.data() + static_cast<size_t>(h) * rest;
        for (int i = 0; i < rest; ++i) {
          const float* vi = v + hd8_ + i;
          for (int u = t; u < end; ++u, vi += kv_row_) tail[i] += att[u] * *vi;
        }
      }
    }
    for (int h = 0; h < a_.n_heads; ++h) {
      float* xb = out + static_cast<size_t>(h) * hd_;
      const F32x8* acc = w.acc.data() + static_cast<size_t>(h) * chunks * 4;
      for (int c = 0; c < chunks; ++c, acc += 4)
        ((acc[0] + acc[1]) + (acc[2] + acc[3])).Store(xb + c * 8);
      for (int i = 0; i < rest; ++i)
        xb[hd8_ + i] = w.tail[static_cast<size_t>(h) * rest + i];
    }
  }

  const PagedAttentionArgs& a_;
  const int hd_, hd8_, kv_mul_;
  const size_t kv_row_;
};

}  // namespace

bool WriteKvRow(char* layer_base, const KvPageLayout& layout, PageRef ref,
                int slot, const float* k, const float* v,
                const StampIdentity& writer, uint32_t layer,
                std::vector<WatermarkViolation>* violations) {
  CHECK_GE(slot, 0);
  CHECK_LT(slot, layout.page_tokens);
  char* page = layout.page(layer_base, ref.page);
  const size_t row = static_cast<size_t>(layout.kv_heads) * layout.head_dim;
  std::memcpy(KvPageLayout::keys(page) + slot * row, k, row * sizeof(float));
  std::memcpy(layout.values(page) + slot * row, v, row * sizeof(float));
  PageStamp* stamp = KvPageLayout::stamp(page);
  const auto late = StampWrite(stamp, writer, slot, slot + 1);
  if (!late.has_value()) return true;
  if (violations != nullptr) {
    WatermarkViolation viol;
    viol.kind = *late;
    viol.layer = layer;
    viol.page = ref.page;
    viol.slots_read = 0;
    viol.reader = writer;
    viol.writer = writer;
    viol.owner = stamp->owner;
    viol.filled = stamp->filled;
    violations->push_back(viol);
  }
  return false;
}

int CheckPageStamps(const PagedAttentionArgs& a, int num_tokens) {
  const int pt = a.layout.page_tokens;
  const int pages = (num_tokens + pt - 1) / pt;
  CHECK_LE(pages, a.num_block_pages) << "block table too short";
  int found = 0;
  for (int p = 0; p < pages; ++p) {
    const PageRef ref = a.block_table[p];
    const PageStamp& stamp =
        *KvPageLayout::stamp(a.layout.page(a.layer_base, ref.page));
    const uint32_t slots = static_cast<uint32_t>(
        num_tokens - p * pt < pt ? num_tokens - p * pt : pt);
    const StampIdentity reader{a.reader_request, a.reader_tenant,
                               ref.generation};
    StampIdentity source;
    bool source_shared = false;
    const auto kind =
        ClassifyRead(stamp, reader, slots, &source, &source_shared);
    if (!kind.has_value()) continue;
    ++found;
    if (a.violations != nullptr) {
      WatermarkViolation v;
      v.kind = *kind;
      v.layer = a.layer;
      v.page = ref.page;
      v.slots_read = slots;
      v.reader = reader;
      v.writer = source;
      v.writer_shared = source_shared;
      v.owner = stamp.owner;
      v.filled = stamp.filled;
      a.violations->push_back(v);
    }
  }
  return found;
}

bool PagedAttention(const PagedAttentionArgs& a) {
  const int num_tokens = a.first_pos + a.num_queries;
  const size_t q_row = static_cast<size_t>(a.n_heads) * a.head_dim;
  if (a.mode != WatermarkMode::kOff) {
    const int found = CheckPageStamps(a, num_tokens);
    if (found > 0 && a.mode == WatermarkMode::kEnforce) {
      std::memset(a.out, 0, q_row * a.num_queries * sizeof(float));
      return false;
    }
  } else {
    CHECK_LE((num_tokens + a.layout.page_tokens - 1) / a.layout.page_tokens,
             a.num_block_pages);
  }
  QueryAttention attention(a);
  for (int qi = 0; qi < a.num_queries; ++qi) {
    attention.Run(a.q + qi * q_row, a.first_pos + qi + 1, a.out + qi * q_row);
  }
  return true;
}

}  // namespace kvcanary::kernels
