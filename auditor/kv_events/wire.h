// The wire format of the KV-cache event streams vLLM and SGLang publish on
// a ZeroMQ PUB socket (`--kv-events-config`), and our engine too
// (docs/kv-events.md, docs/kv-events-wire.md for the sources):
//   a message is three frames: topic, an 8-byte big-endian sequence number,
//   a msgpack payload;
//   the payload is a batch [ts, events, data_parallel_rank?];
//   an event is either a positional array whose first element is its tag
//   (older vLLM: ["BlockStored", block_hashes, parent, token_ids,
//   block_size, lora_id, medium?, ...]) or a map with its tag under "type"
//   (newer vLLM: {"type": "BlockStored", "block_hashes": …, …}).
// Block hashes are integers (older vLLM, SGLang) or bytes (vLLM's SHA-256
// hashes); both become a BlockHash. Everything here is untrusted input:
// bad bytes are an error naming what was wrong, never a crash.
#ifndef KVCANARY_AUDITOR_KV_EVENTS_WIRE_H_
#define KVCANARY_AUDITOR_KV_EVENTS_WIRE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary::auditor::kv_events {

// A block hash as the engine wrote it: "i" + the 8 bytes (big-endian) of an
// integer hash (two's complement for a negative one), or "b" + the bytes of
// a bytes hash, so the two kinds never compare equal.
struct BlockHash {
  std::string key;

  bool operator==(const BlockHash& o) const { return key == o.key; }
  bool operator!=(const BlockHash& o) const { return key != o.key; }
  bool operator<(const BlockHash& o) const { return key < o.key; }
  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.key);
  }
  static BlockHash FromInt(uint64_t bits);
  static BlockHash FromBytes(absl::string_view bytes);
  // "0x…" for an integer, hex for bytes; `max_hex` > 0 shortens it.
  std::string Hex(size_t max_hex = 0) const;
};

enum class EventType { kBlockStored, kBlockRemoved, kAllBlocksCleared };
const char* EventTypeName(EventType t);

struct Event {
  EventType type = EventType::kBlockStored;
  std::vector<BlockHash> block_hashes;
  std::optional<BlockHash> parent;  // BlockStored; none for a chain's root
  // BlockStored: the tokens of every stored block, in order (block_size
  // each where the engine reports whole blocks). Held only until the
  // ledger digests them.
  std::vector<int64_t> token_ids;
  int64_t block_size = 0;
  std::optional<int64_t> lora_id;
  std::string medium;  // "" when absent
};

struct Batch {
  double ts = 0;  // the publisher's clock, seconds since the epoch
  std::vector<Event> events;
  std::optional<int64_t> data_parallel_rank;
  // Events whose tag this decoder does not know (a newer engine's), counted
  // and skipped rather than failing the batch.
  int unknown_events = 0;
  // Which shapes the events came in ("array", "map").
  bool array_events = false, map_events = false;
};

// Decodes a batch payload. kInvalidArgument (with what was wrong) for bytes
// that are not msgpack, a batch of the wrong shape, or a known event with a
// field of the wrong type. Bounded: containers of at most 1,000,000
// elements, 64 levels deep.
absl::StatusOr<Batch> DecodeBatch(absl::string_view payload);

// The sequence number frame: 8 bytes, big-endian, signed (the replay
// socket's end marker is -1).
absl::StatusOr<int64_t> DecodeSequence(absl::string_view frame);
std::string EncodeSequence(int64_t seq);

}  // namespace kvcanary::auditor::kv_events

#endif  // KVCANARY_AUDITOR_KV_EVENTS_WIRE_H_
