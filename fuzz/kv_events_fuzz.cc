// Fuzz target for the KV-cache event decoder (auditor/kv_events/wire.h):
// the msgpack batches of vLLM's and SGLang's event streams are untrusted
// bytes from the network. CHECKs what must hold for any input:
//   - a failure is kInvalidArgument with a message, never a crash;
//   - a decoded batch is bounded by its bytes (no event or hash from
//     nothing) and stored blocks name at least one hash each;
//   - decoding is deterministic.
// Built as a libFuzzer target with Clang (kvcanary_kv_events_fuzzer) and,
// for every compiler, driven by kv_events_fuzz_smoke_main.cc (ctest -L
// fuzz).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "auditor/kv_events/wire.h"
#include "common/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvcanary::auditor::kv_events;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<Batch> b = DecodeBatch(bytes);
  if (!b.ok()) {
    CHECK(absl::IsInvalidArgument(b.status())) << b.status();
    CHECK(!b.status().message().empty());
    return 0;
  }
  size_t hashes = 0, tokens = 0;
  for (const Event& e : b->events) {
    if (e.type != EventType::kAllBlocksCleared) {
      hashes += e.block_hashes.size();
    }
    tokens += e.token_ids.size();
    CHECK(e.block_size >= 0);
  }
  // Every element takes at least one byte of input.
  CHECK(b->events.size() + hashes + tokens <= size) << size;
  const absl::StatusOr<Batch> again = DecodeBatch(bytes);
  CHECK(again.ok() && again->events.size() == b->events.size());
  if (size >= 8) {
    const absl::StatusOr<int64_t> seq = DecodeSequence(bytes.substr(0, 8));
    CHECK(seq.ok() && EncodeSequence(*seq) == bytes.substr(0, 8));
  }
  return 0;
}
