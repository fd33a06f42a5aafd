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

// xb = sum_t att[t] * v_t for the head at head_off, page by page. One
// 8-lane chunk of head_dim at a time, with four accumulators (token t goes to
// accumulator t % 4, by absolute position, so the sum never depends on page
// size or batch), combined as (a0 + a1) + (a2 + a3).
void WeightedSum(const PagedAttentionArgs& a, const float* att, int n,
                 size_t head_off, size_t kv_row, float* xb) {
  const int hd = a.head_dim, hd8 = hd & ~7;
  const int pt = a.layout.page_tokens;
  for (int c = 0; c < hd8; c += 8) {
    F32x8 acc[4] = {F32x8::Zero(), F32x8::Zero(), F32x8::Zero(), F32x8::Zero()};
    for (int p = 0, t = 0; t < n; ++p, t += pt) {
      const float* v =
          a.layout.values(a.layout.page(a.layer_base, a.block_table[p].page)) +
          head_off + c;
      const int end = n - t < pt ? n : t + pt;  // absolute, exclusive
      int u = t;
      for (; u < end && (u & 3) != 0; ++u, v += kv_row) {
        acc[u & 3] =
            MulAdd(F32x8::Broadcast(att[u]), F32x8::Load(v), acc[u & 3]);
      }
      F32x8 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
      for (; u + 4 <= end; u += 4, v += 4 * kv_row) {
        a0 = MulAdd(F32x8::Broadcast(att[u]), F32x8::Load(v), a0);
        a1 = MulAdd(F32x8::Broadcast(att[u + 1]), F32x8::Load(v + kv_row), a1);
        a2 = MulAdd(F32x8::Broadcast(att[u + 2]), F32x8::Load(v + 2 * kv_row),
                    a2);
        a3 = MulAdd(F32x8::Broadcast(att[u + 3]), F32x8::Load(v + 3 * kv_row),
                    a3);
      }
      acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
      for (; u < end; ++u, v += kv_row) {
        acc[u & 3] =
            MulAdd(F32x8::Broadcast(att[u]), F32x8::Load(v), acc[u & 3]);
      }
    }
    ((acc[0] + acc[1]) + (acc[2] + acc[3])).Store(xb + c);
  }
  for (int i = hd8; i < hd; ++i) {
    float sum = 0.0f;
    for (int p = 0, t = 0; t < n; ++p, t += pt) {
      const float* v =
          a.layout.values(a.layout.page(a.layer_base, a.block_table[p].page)) +
          head_off + i;
      const int slots = n - t < pt ? n - t : pt;
      for (int s = 0; s < slots; ++s, v += kv_row) sum += att[t + s] * *v;
    }
    xb[i] = sum;
  }
}

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
  const int hd = a.head_dim;
  const int kv_mul = a.n_heads / a.n_kv_heads;
  const int pt = a.layout.page_tokens;
  const size_t kv_row = static_cast<size_t>(a.n_kv_heads) * hd;
  const float scale = sqrtf(static_cast<float>(hd));
  for (int qi = 0; qi < a.num_queries; ++qi) {
    const int n = a.first_pos + qi + 1;  // tokens this query attends to
    const int pages = (n + pt - 1) / pt;
    for (int h = 0; h < a.n_heads; ++h) {
      const float* q = a.q + qi * q_row + static_cast<size_t>(h) * hd;
      const size_t head_off = static_cast<size_t>(h / kv_mul) * hd;
      float* att = a.scores;
      // Scores, page by page: q · k for every token, then / sqrt(head_dim).
      for (int p = 0, t = 0; p < pages; ++p, t += pt) {
        const float* k = KvPageLayout::keys(a.layout.page(
                             a.layer_base, a.block_table[p].page)) +
                         head_off;
        const int slots = n - t < pt ? n - t : pt;
        int s = 0;
        for (; s + 8 <= slots; s += 8)
          Dot8(q, k + s * kv_row, kv_row, hd, att + t + s);
        for (; s < slots; ++s) att[t + s] = Dot(q, k + s * kv_row, hd);
      }
      const F32x8 scale8 = F32x8::Broadcast(scale);
      int t = 0;
      for (; t + 8 <= n; t += 8) (F32x8::Load(att + t) / scale8).Store(att + t);
      for (; t < n; ++t) att[t] /= scale;
      Softmax(att, n);
      // Weighted sum of values, accumulated in registers.
      float* xb = a.out + qi * q_row + static_cast<size_t>(h) * hd;
      WeightedSum(a, att, n, head_off, kv_row, xb);
    }
  }
  return true;
}

}  // namespace kvcanary::kernels
