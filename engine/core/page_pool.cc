#include "engine/core/page_pool.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary::engine {

static_assert(static_cast<int>(TraceScrub::kPoison) ==
              static_cast<int>(ScrubPolicy::kPoison));

void PagePool::FreeDeleter::operator()(char* p) const { std::free(p); }

const char* ScrubPolicyName(ScrubPolicy policy) {
  switch (policy) {
    case ScrubPolicy::kNone:
      return "none";
    case ScrubPolicy::kZero:
      return "zero";
    case ScrubPolicy::kPoison:
      return "poison";
  }
  return "unknown";
}

absl::StatusOr<ScrubPolicy> ParseScrubPolicy(absl::string_view name) {
  if (name == "none") return ScrubPolicy::kNone;
  if (name == "zero") return ScrubPolicy::kZero;
  if (name == "poison") return ScrubPolicy::kPoison;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown scrub policy '", name, "' (want none, zero or poison)"));
}

const char* FreeListOrderName(FreeListOrder order) {
  return order == FreeListOrder::kFifo ? "fifo" : "lifo";
}

absl::StatusOr<FreeListOrder> ParseFreeListOrder(absl::string_view name) {
  if (name == "lifo") return FreeListOrder::kLifo;
  if (name == "fifo") return FreeListOrder::kFifo;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown free-list order '", name, "' (want lifo or fifo)"));
}

PagePool::PagePool(const PagePoolOptions& options) : options_(options) {
  CHECK_GT(options.num_pages, 0);
  CHECK_GT(options.n_layers, 0);
  CHECK_GT(options.layout.page_tokens, 0);
  const size_t bytes = options.layout.page_bytes() * options.num_pages;
  for (int l = 0; l < options.n_layers; ++l) {
    char* base = static_cast<char*>(std::aligned_alloc(64, bytes));
    CHECK(base != nullptr) << "cannot allocate " << bytes << " bytes of KV";
    std::memset(base, 0, bytes);
    layers_.emplace_back(base);
    for (int p = 0; p < options.num_pages; ++p) {
      PageStamp* stamp = KvPageLayout::stamp(
          options.layout.page(base, PageId(static_cast<uint32_t>(p))));
      new (stamp) PageStamp();
      stamp->layer = static_cast<uint16_t>(l);
      stamp->page = PageId(static_cast<uint32_t>(p));
    }
  }
  generation_.assign(options.num_pages, PageGeneration(0));
  is_free_.assign(options.num_pages, true);
  // Page 0 is handed out first either way.
  for (int p = 0; p < options.num_pages; ++p) {
    const PageId page(static_cast<uint32_t>(p));
    if (options.free_list == FreeListOrder::kFifo) {
      free_.push_back(page);
    } else {
      free_.push_front(page);
    }
  }
}

std::vector<PageRef> PagePool::Allocate(TenantId tenant, RequestId request,
                                        int num_pages) {
  CHECK(CanAllocate(num_pages));
  std::vector<PageRef> refs;
  refs.reserve(num_pages);
  for (int i = 0; i < num_pages; ++i) {
    PageId page;
    if (options_.free_list == FreeListOrder::kFifo) {
      page = free_.front();
      free_.pop_front();
    } else {
      page = free_.back();
      free_.pop_back();
    }
    is_free_[page.value()] = false;
    PageGeneration& gen = generation_[page.value()];
    gen = PageGeneration(gen.value() + 1);
    for (int l = 0; l < n_layers(); ++l) {
      PageStamp* stamp =
          KvPageLayout::stamp(layout().page(layer_base(l), page));
      stamp->owner = StampIdentity{request, tenant, gen};
    }
    refs.push_back(PageRef{page, gen});
    if (options_.trace != nullptr) {
      TraceEvent e;
      e.type = TraceEventType::kPageAlloc;
      e.page = page;
      e.gen = gen;
      e.tenant = tenant;
      e.request = request;
      options_.trace->Emit(e);
    }
  }
  return refs;
}

void PagePool::Free(const std::vector<PageRef>& pages) {
  for (const PageRef& ref : pages) {
    CHECK_LT(ref.page.value(), static_cast<uint32_t>(num_pages()));
    CHECK(!is_free_[ref.page.value()]) << "double free of page " << ref.page;
    CHECK(generation_[ref.page.value()] == ref.generation)
        << "free of page " << ref.page << " generation " << ref.generation
        << " but the page is at generation " << generation_[ref.page.value()];
    is_free_[ref.page.value()] = true;
    free_.push_back(ref.page);
    if (options_.trace != nullptr) {
      const PageStamp& owner = stamp(0, ref.page);
      TraceEvent e;
      e.type = TraceEventType::kPageFree;
      e.page = ref.page;
      e.gen = ref.generation;
      e.tenant = owner.owner.tenant;
      e.request = owner.owner.request;
      e.scrub = static_cast<TraceScrub>(options_.scrub);
      options_.trace->Emit(e);
    }
    if (options_.scrub == ScrubPolicy::kNone) continue;
    const size_t kv_bytes = 2 * layout().kv_floats() * sizeof(float);
    for (int l = 0; l < n_layers(); ++l) {
      char* page = layout().page(layer_base(l), ref.page);
      std::memset(KvPageLayout::keys(page),
                  options_.scrub == ScrubPolicy::kZero ? 0x00 : 0xFF, kv_bytes);
      PageStamp* stamp = KvPageLayout::stamp(page);
      stamp->writer = StampIdentity{};
      stamp->filled = 0;
      stamp->set_shared(false);
      stamp->prior = StampIdentity{};
      stamp->prior_filled = 0;
    }
  }
}

}  // namespace kvcanary::engine
