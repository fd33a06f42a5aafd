#include "kernels/paged_attention.h"

#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/cpu_kernels.h"

namespace kvcanary::kernels {

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
    const auto kind = ClassifyRead(stamp, reader, slots);
    if (!kind.has_value()) continue;
    ++found;
    if (a.violations != nullptr) {
      WatermarkViolation v;
      v.kind = *kind;
      v.layer = a.layer;
      v.page = ref.page;
      v.slots_read = slots;
      v.reader = reader;
      v.writer = stamp.writer;
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
    const int pos = a.first_pos + qi;
    for (int h = 0; h < a.n_heads; ++h) {
      const float* q = a.q + qi * q_row + static_cast<size_t>(h) * hd;
      const size_t head_off = static_cast<size_t>(h / kv_mul) * hd;
      float* att = a.scores;
      for (int t = 0; t <= pos; ++t) {
        const char* page =
            a.layout.page(a.layer_base, a.block_table[t / pt].page);
        const float* k =
            KvPageLayout::keys(page) + (t % pt) * kv_row + head_off;
        float score = 0.0f;
        for (int i = 0; i < hd; ++i) score += q[i] * k[i];
        att[t] = score / scale;
      }
      Softmax(att, pos + 1);
      float* xb = a.out + qi * q_row + static_cast<size_t>(h) * hd;
      std::memset(xb, 0, hd * sizeof(float));
      for (int t = 0; t <= pos; ++t) {
        const char* page =
            a.layout.page(a.layer_base, a.block_table[t / pt].page);
        const float* v = a.layout.values(page) + (t % pt) * kv_row + head_off;
        const float w = att[t];
        for (int i = 0; i < hd; ++i) xb[i] += w * v[i];
      }
    }
  }
  return true;
}

}  // namespace kvcanary::kernels
