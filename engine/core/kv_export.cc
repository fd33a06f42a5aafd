#include "engine/core/kv_export.h"

#include <cstring>

#include "common/check.h"

namespace kvcanary::engine {

std::vector<kv::Page> ExportKvPages(const PagePool& pool,
                                    const std::vector<PageRef>& block_table,
                                    int num_tokens) {
  const KvPageLayout& layout = pool.layout();
  const int pt = layout.page_tokens;
  const int pages = pool.PagesFor(num_tokens);
  CHECK_LE(pages, static_cast<int>(block_table.size()));
  const size_t row_bytes =
      static_cast<size_t>(layout.kv_heads) * layout.head_dim * sizeof(float);
  std::vector<kv::Page> out;
  out.reserve(static_cast<size_t>(pages) * pool.n_layers());
  for (int i = 0; i < pages; ++i) {
    const int slots = num_tokens - i * pt < pt ? num_tokens - i * pt : pt;
    for (int l = 0; l < pool.n_layers(); ++l) {
      const char* src = layout.page(pool.layer_base(l), block_table[i].page);
      kv::Page page;
      page.index = static_cast<uint32_t>(i);
      page.layer = static_cast<uint32_t>(l);
      page.stamp = *KvPageLayout::stamp(src);
      page.slots = static_cast<uint32_t>(slots);
      const size_t half = slots * row_bytes;
      page.kv_bytes.resize(2 * half);
      std::memcpy(page.kv_bytes.data(), KvPageLayout::keys(src), half);
      std::memcpy(page.kv_bytes.data() + half, layout.values(src), half);
      out.push_back(std::move(page));
    }
  }
  return out;
}

}  // namespace kvcanary::engine
