// Paged KV storage layout and the paged attention kernel with its watermark
// check.
//
// One layer's KV pool is a byte buffer of `num_pages` pages of
// KvPageLayout::page_bytes() each. A page holds, in this order:
//   PageStamp (common/page_stamp.h), padded to kStampBytes
//   K: (page_tokens, kv_heads, head_dim), f32
//   V: (page_tokens, kv_heads, head_dim), f32
// so the stamp travels with the data through any copy of the page.
#ifndef KVCANARY_KERNELS_PAGED_ATTENTION_H_
#define KVCANARY_KERNELS_PAGED_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/ids.h"
#include "common/page_stamp.h"

namespace kvcanary::kernels {

struct KvPageLayout {
  static constexpr size_t kStampBytes = 128;
  static_assert(sizeof(PageStamp) <= kStampBytes, "stamp must fit its slot");

  int page_tokens = 16;
  int kv_heads = 0;
  int head_dim = 0;

  size_t kv_floats() const {
    return static_cast<size_t>(page_tokens) * kv_heads * head_dim;
  }
  size_t page_bytes() const {
    const size_t raw = kStampBytes + 2 * kv_floats() * sizeof(float);
    return (raw + 63) & ~static_cast<size_t>(63);
  }
  char* page(char* layer_base, PageId id) const {
    return layer_base + static_cast<size_t>(id.value()) * page_bytes();
  }
  const char* page(const char* layer_base, PageId id) const {
    return layer_base + static_cast<size_t>(id.value()) * page_bytes();
  }
  static PageStamp* stamp(char* page) {
    return reinterpret_cast<PageStamp*>(page);
  }
  static const PageStamp* stamp(const char* page) {
    return reinterpret_cast<const PageStamp*>(page);
  }
  static float* keys(char* page) {
    return reinterpret_cast<float*>(page + kStampBytes);
  }
  static const float* keys(const char* page) {
    return reinterpret_cast<const float*>(page + kStampBytes);
  }
  float* values(char* page) const { return keys(page) + kv_floats(); }
  const float* values(const char* page) const {
    return keys(page) + kv_floats();
  }
};

// One entry of a sequence's block table: the page holding its tokens
// [i * page_tokens, (i + 1) * page_tokens), and the generation the page had
// when the sequence was given it.
struct PageRef {
  PageId page;
  PageGeneration generation;
};

// Writes one token's K and V rows (kv_heads * head_dim floats each) into
// `slot` of the page `ref`, and stamps the page as written by `writer`.
// Returns false (and appends a kLateWrite violation when `violations` is not
// null) if the page was reallocated since `writer` reserved it; the data has
// landed either way, as a late DMA would.
bool WriteKvRow(char* layer_base, const KvPageLayout& layout, PageRef ref,
                int slot, const float* k, const float* v,
                const StampIdentity& writer, uint32_t layer,
                std::vector<WatermarkViolation>* violations);

struct PagedAttentionArgs {
  const float* q = nullptr;  // (num_queries, n_heads, head_dim), f32, RoPE'd
  float* out = nullptr;      // (num_queries, n_heads, head_dim), f32
  // Query i sits at position first_pos + i and attends to [0, first_pos + i]
  // (causal). Decode is num_queries == 1; prefill passes a whole chunk.
  int first_pos = 0;
  int num_queries = 1;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  const char* layer_base = nullptr;  // this layer's page buffer
  KvPageLayout layout;
  const PageRef* block_table = nullptr;
  int num_block_pages = 0;  // entries in block_table
  uint32_t layer = 0;
  // Watermark check: who is reading. The generation of each page comes from
  // the block table.
  WatermarkMode mode = WatermarkMode::kEnforce;
  TenantId reader_tenant;
  RequestId reader_request;
  std::vector<WatermarkViolation>* violations = nullptr;  // appended to
};

// Attention over the pages of the block table. Unless mode is kOff, first
// checks the stamp of every page the queries read (once per call, not per
// query) and appends each violation, attributed to the page's writer. In
// kEnforce, any violation means no attention is computed: `out` is zeroed and
// the function returns false. Otherwise returns true.
// REQUIRES: the block table covers [0, first_pos + num_queries).
bool PagedAttention(const PagedAttentionArgs& args);

// The stamp check alone (the first half of PagedAttention): appends the
// violations of reading [0, num_tokens) and returns how many it found.
int CheckPageStamps(const PagedAttentionArgs& args, int num_tokens);

}  // namespace kvcanary::kernels

#endif  // KVCANARY_KERNELS_PAGED_ATTENTION_H_
