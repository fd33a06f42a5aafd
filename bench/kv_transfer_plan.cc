// The KV transfer bench's plan: page frames of the 260K model's geometry,
// encoded once, and how many transfers of them make the MiB asked for.
#include "bench/kv_transfer_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>

namespace kvcanary::engine::bench {

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

KvGeometry Geometry() {
  KvGeometry g;
  g.page_tokens = 16;
  g.n_layers = 5;
  g.kv_heads = 4;
  g.head_dim = 8;
  g.vocab_size = 512;
  return g;
}

Plan MakePlan(int transfer_mb, int pages_per_transfer) {
  const KvGeometry g = Geometry();
  Plan plan;
  plan.prompt_pages = std::max(1, pages_per_transfer / g.n_layers);
  for (int index = 0; index < plan.prompt_pages; ++index) {
    for (int layer = 0; layer < g.n_layers; ++layer) {
      kv::Page p;
      p.index = static_cast<uint32_t>(index);
      p.layer = static_cast<uint32_t>(layer);
      p.stamp.layer = static_cast<uint32_t>(layer);
      p.stamp.page = PageId(static_cast<uint32_t>(index));
      p.stamp.filled = static_cast<uint32_t>(g.page_tokens);
      p.slots = static_cast<uint32_t>(g.page_tokens);
      p.kv_bytes.assign(2 * g.page_tokens * g.row_bytes(),
                        static_cast<char>(0x5a + index + layer));
      kv::EncodeFrame(p, &plan.stream);
      plan.pages.push_back(std::move(p));
    }
  }
  const uint64_t total = static_cast<uint64_t>(transfer_mb) << 20;
  plan.transfers =
      static_cast<int>(std::max<uint64_t>(1, total / plan.stream.size()));
  plan.kv_bytes = uint64_t{2} * g.page_tokens * g.row_bytes() *
                  plan.pages.size() * plan.transfers;
  return plan;
}

}  // namespace kvcanary::engine::bench
