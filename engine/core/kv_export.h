// Reading a request's K/V pages out of a page pool as transfer Page frames
// (the prefill node's side of the KV transfer).
#ifndef KVCANARY_ENGINE_CORE_KV_EXPORT_H_
#define KVCANARY_ENGINE_CORE_KV_EXPORT_H_

#include <vector>

#include "engine/core/page_pool.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine {

// The pages holding tokens [0, num_tokens) of `block_table`, every layer,
// page-major: each with its stamp as it is in memory and the K/V of its
// filled slots. REQUIRES: the pages are not written while this runs.
std::vector<kv::Page> ExportKvPages(const PagePool& pool,
                                    const std::vector<PageRef>& block_table,
                                    int num_tokens);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_KV_EXPORT_H_
