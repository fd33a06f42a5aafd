#include "engine/nodes/request_ids.h"

#include "common/random.h"

namespace kvcanary::engine {
namespace {
constexpr uint64_t kCounterMask = (uint64_t{1} << kRequestIdCounterBits) - 1;
constexpr uint32_t kEpochMask = (uint32_t{1} << kRequestIdEpochBits) - 1;
}  // namespace

RequestId ComposeRequestId(uint32_t epoch, uint64_t n) {
  // 1 .. 2^40 - 2: never all zeros, never all ones.
  const uint64_t low = 1 + n % (kCounterMask - 1);
  return RequestId(uint64_t{epoch & kEpochMask} << kRequestIdCounterBits | low);
}

uint32_t RequestIdEpoch(RequestId id) {
  return static_cast<uint32_t>(id.value() >> kRequestIdCounterBits) &
         kEpochMask;
}

uint32_t RandomRequestIdEpoch() {
  return static_cast<uint32_t>(RandomU64()) & kEpochMask;
}

RequestIdSequence::RequestIdSequence(uint32_t epoch)
    : epoch_(epoch & kEpochMask) {}

}  // namespace kvcanary::engine
