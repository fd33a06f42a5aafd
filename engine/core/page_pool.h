// The paged KV cache: a fixed pool of pages, each holding `page_tokens` token
// slots of K and V for every layer, with the page stamp (the watermark) at the
// head of each page of each layer. See kernels/paged_attention.h for the byte
// layout and common/page_stamp.h for the stamp.
//
// Every allocation bumps the page's generation and stamps it with its new
// owner in every layer. The writer half of the stamp is left as it was: the
// page still holds the previous writer's bytes until its new owner writes, and
// the stamp says so (that is what lets a read of stale content be attributed
// to the tenant whose data it is).
//
// Not thread-safe; owned by the engine thread.
#ifndef KVCANARY_ENGINE_CORE_PAGE_POOL_H_
#define KVCANARY_ENGINE_CORE_PAGE_POOL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/ids.h"
#include "common/page_stamp.h"
#include "engine/core/trace_bus.h"
#include "kernels/paged_attention.h"

namespace kvcanary::engine {

using kernels::KvPageLayout;
using kernels::PageRef;

// What happens to a page's K/V bytes when it is freed.
enum class ScrubPolicy {
  kNone,    // left as they are (what production engines do): the stamp keeps
            // naming the last writer
  kZero,    // zeroed; the stamp says "never written"
  kPoison,  // filled with NaN bits, so any read of them poisons the output;
            // the stamp says "never written"
};
const char* ScrubPolicyName(ScrubPolicy policy);
absl::StatusOr<ScrubPolicy> ParseScrubPolicy(absl::string_view name);

// The order free pages are handed out in (--free-list). Either way a fresh
// pool hands out page 0, 1, 2, ... first.
enum class FreeListOrder {
  kLifo,  // the most recently freed page first (the default): a freed page
          // goes to the next request at once
  kFifo,  // the least recently freed page first: a freed page waits until
          // every page freed before it was handed out again
};
const char* FreeListOrderName(FreeListOrder order);  // "lifo" or "fifo"
absl::StatusOr<FreeListOrder> ParseFreeListOrder(absl::string_view name);

struct PagePoolOptions {
  int num_pages = 0;
  int n_layers = 0;
  KvPageLayout layout;
  ScrubPolicy scrub = ScrubPolicy::kNone;
  FreeListOrder free_list = FreeListOrder::kLifo;
  TraceBus* trace = nullptr;  // page_alloc / page_free events; may be null
};

class PagePool {
 public:
  explicit PagePool(const PagePoolOptions& options);

  int num_pages() const { return options_.num_pages; }
  int num_free_pages() const { return static_cast<int>(free_.size()); }
  int num_used_pages() const { return num_pages() - num_free_pages(); }
  const KvPageLayout& layout() const { return options_.layout; }
  int n_layers() const { return options_.n_layers; }
  int page_tokens() const { return options_.layout.page_tokens; }
  // Pages needed to hold `num_tokens` tokens.
  int PagesFor(int num_tokens) const {
    return (num_tokens + page_tokens() - 1) / page_tokens();
  }

  bool CanAllocate(int num_pages) const {
    return num_pages <= num_free_pages();
  }
  // Gives `num_pages` pages to (tenant, request), in the options' free-list
  // order. REQUIRES: CanAllocate(num_pages).
  std::vector<PageRef> Allocate(TenantId tenant, RequestId request,
                                int num_pages);
  // Returns pages to the pool, scrubbed as the options say. REQUIRES: each
  // ref is the page's current allocation (its generation matches) and is
  // not already free.
  void Free(const std::vector<PageRef>& pages);

  // This layer's page buffer: (num_pages, page_bytes) bytes.
  char* layer_base(int layer) { return layers_[layer].get(); }
  const char* layer_base(int layer) const { return layers_[layer].get(); }
  const PageStamp& stamp(int layer, PageId page) const {
    return *KvPageLayout::stamp(layout().page(layer_base(layer), page));
  }
  PageGeneration generation(PageId page) const {
    return generation_[page.value()];
  }
  bool is_free(PageId page) const { return is_free_[page.value()]; }
  size_t size_bytes() const {
    return layout().page_bytes() * num_pages() * n_layers();
  }

 private:
  PagePoolOptions options_;
  struct FreeDeleter {
    void operator()(char* p) const;
  };
  std::vector<std::unique_ptr<char, FreeDeleter>> layers_;  // per layer
  std::vector<PageGeneration> generation_;                  // per page
  std::vector<bool> is_free_;                               // per page
  // Freed pages are pushed at the back; lifo hands out back() next, fifo
  // front().
  std::deque<PageId> free_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_PAGE_POOL_H_
