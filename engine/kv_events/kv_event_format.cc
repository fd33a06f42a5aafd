#include "engine/kv_events/kv_event_format.h"

#include <msgpack.hpp>

#include "absl/time/time.h"

namespace kvcanary::engine {
namespace {

namespace names = kv_event_names;
using Packer = msgpack::packer<msgpack::sbuffer>;

void PackStr(Packer& pk, absl::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void PackHash(Packer& pk, const BlockHash& h) {
  pk.pack_bin(static_cast<uint32_t>(h.size()));
  pk.pack_bin_body(reinterpret_cast<const char*>(h.data()),
                   static_cast<uint32_t>(h.size()));
}

void PackHashes(Packer& pk, const std::vector<BlockHash>& hashes) {
  pk.pack_array(static_cast<uint32_t>(hashes.size()));
  for (const BlockHash& h : hashes) PackHash(pk, h);
}

const char* MediumName(KvCacheEvent::Medium medium) {
  return medium == KvCacheEvent::Medium::kCpu ? names::kMediumCpu
                                              : names::kMediumGpu;
}

void PackStored(Packer& pk, const KvCacheEvent& e, int block_size) {
  pk.pack_map(e.cache_salt.has_value() ? 9 : 8);
  PackStr(pk, names::kType);
  PackStr(pk, names::kBlockStored);
  PackStr(pk, names::kBlockHashes);
  PackHashes(pk, e.block_hashes);
  PackStr(pk, names::kParentBlockHash);
  if (e.parent.has_value()) {
    PackHash(pk, *e.parent);
  } else {
    pk.pack_nil();
  }
  PackStr(pk, names::kTokenIds);
  pk.pack_array(static_cast<uint32_t>(e.token_ids.size()));
  for (int t : e.token_ids) pk.pack_int(t);
  PackStr(pk, names::kBlockSize);
  pk.pack_int(block_size);
  PackStr(pk, names::kLoraId);
  pk.pack_nil();
  PackStr(pk, names::kMedium);
  PackStr(pk, MediumName(e.medium));
  PackStr(pk, names::kLoraName);
  pk.pack_nil();
  if (e.cache_salt.has_value()) {
    // vLLM: one entry per block, block 0's the salt (its last element; no
    // LoRA or multimodal keys here), nil for the rest. Omitted (its
    // default) without a salt.
    PackStr(pk, names::kExtraKeys);
    pk.pack_array(static_cast<uint32_t>(e.block_hashes.size()));
    pk.pack_array(1);
    PackStr(pk, *e.cache_salt);
    for (size_t i = 1; i < e.block_hashes.size(); ++i) pk.pack_nil();
  }
}

void PackEvent(Packer& pk, const KvCacheEvent& e, int block_size) {
  switch (e.type) {
    case KvCacheEvent::Type::kStored:
      PackStored(pk, e, block_size);
      return;
    case KvCacheEvent::Type::kRemoved:
      pk.pack_map(3);
      PackStr(pk, names::kType);
      PackStr(pk, names::kBlockRemoved);
      PackStr(pk, names::kBlockHashes);
      PackHashes(pk, e.block_hashes);
      PackStr(pk, names::kMedium);
      PackStr(pk, MediumName(e.medium));
      return;
    case KvCacheEvent::Type::kAllCleared:
      pk.pack_map(1);
      PackStr(pk, names::kType);
      PackStr(pk, names::kAllBlocksCleared);
      return;
  }
}

}  // namespace

std::string EncodeKvEventBatch(const KvEventBatch& batch, int block_size,
                               int data_parallel_rank) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  pk.pack_array(3);
  pk.pack_double(absl::ToDoubleSeconds(batch.time - absl::UnixEpoch()));
  pk.pack_array(static_cast<uint32_t>(batch.events.size()));
  for (const KvCacheEvent& e : batch.events) PackEvent(pk, e, block_size);
  pk.pack_int(data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

std::string EncodeSeq(int64_t seq) {
  const uint64_t u = static_cast<uint64_t>(seq);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<char>((u >> (56 - 8 * i)) & 0xff);
  }
  return out;
}

absl::StatusOr<int64_t> DecodeSeq(absl::string_view frame) {
  if (frame.size() != 8) {
    return absl::InvalidArgumentError(
        "a sequence number frame is 8 bytes, big-endian");
  }
  uint64_t u = 0;
  for (unsigned char c : frame) u = (u << 8) | c;
  return static_cast<int64_t>(u);
}

}  // namespace kvcanary::engine
