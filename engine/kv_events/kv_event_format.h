// The KV cache event stream's wire format, as vLLM's ZmqEventPublisher
// (vllm/distributed/kv_events.py) writes it; docs/nodes.md, "KV cache
// events". Every message on the PUB socket has three frames:
//
//   topic (--kv-events-topic, "" by default)
//   seq   8 bytes, big-endian: 0 for a process's first batch, +1 per batch
//   payload, msgpack: [ts, [event, ...], data_parallel_rank]
//
// ts is a float64 in seconds since the epoch, data_parallel_rank 0; each
// event is a map whose "type" key comes first (msgspec's tagged structs):
//
//   {"type": "BlockStored", "block_hashes": [bin 32, ...],
//    "parent_block_hash": bin 32 | nil, "token_ids": [int, ...],
//    "block_size": int, "lora_id": nil, "medium": "GPU" | "CPU",
//    "lora_name": nil[, "extra_keys": [[cache_salt], nil, ...]]}
//   {"type": "BlockRemoved", "block_hashes": [bin 32, ...], "medium": ...}
//   {"type": "AllBlocksCleared"}
//
// The names live in kv_event_names below and nowhere else. This side only
// writes; the auditor's subscriber reads (tests decode with msgpack-cxx).
#ifndef KVCANARY_ENGINE_KV_EVENTS_KV_EVENT_FORMAT_H_
#define KVCANARY_ENGINE_KV_EVENTS_KV_EVENT_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/kv_cache_event.h"

namespace kvcanary::engine {

// vLLM's msgspec tag and field names.
namespace kv_event_names {
inline constexpr char kType[] = "type";
inline constexpr char kBlockStored[] = "BlockStored";
inline constexpr char kBlockRemoved[] = "BlockRemoved";
inline constexpr char kAllBlocksCleared[] = "AllBlocksCleared";
inline constexpr char kBlockHashes[] = "block_hashes";
inline constexpr char kParentBlockHash[] = "parent_block_hash";
inline constexpr char kTokenIds[] = "token_ids";
inline constexpr char kBlockSize[] = "block_size";
inline constexpr char kLoraId[] = "lora_id";
inline constexpr char kMedium[] = "medium";
inline constexpr char kLoraName[] = "lora_name";
// Where the pages live: host memory (vLLM's MEDIUM_CPU; its GPU block
// pool says "GPU").
inline constexpr char kMediumCpu[] = "CPU";
inline constexpr char kMediumGpu[] = "GPU";
inline constexpr char kExtraKeys[] = "extra_keys";
}  // namespace kv_event_names

// The msgpack payload of one batch. `block_size`: the pages' tokens.
std::string EncodeKvEventBatch(const KvEventBatch& batch, int block_size,
                               int data_parallel_rank = 0);

// A sequence number frame: 8 bytes, big-endian, two's complement (the
// replay's end marker is -1).
std::string EncodeSeq(int64_t seq);
// kInvalidArgument unless `frame` is 8 bytes.
absl::StatusOr<int64_t> DecodeSeq(absl::string_view frame);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_KV_EVENTS_KV_EVENT_FORMAT_H_
