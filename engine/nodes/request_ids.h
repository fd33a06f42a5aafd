// The router's request ids, unique across router restarts: stamps, traces,
// access logs and evidence name requests by id, so a restarted router must
// not hand out the ids of the requests before it again.
//
//   id = epoch << 40 | (1 + n mod (2^40 - 2))
//
// epoch: 23 random bits drawn once per router start (bit 63 stays 0, so an
// id fits a signed 64-bit integer: SQLite, JSON readers in other
// languages); n: the router's count of requests, from 0. The low 40 bits are
// never all zeros nor all ones, so no id is 0 (kNoRequest) or 2^64 - 1
// (kReservedRequestId), whatever the epoch. Two router starts share an epoch
// with probability 2^-23.
#ifndef KVCANARY_ENGINE_NODES_REQUEST_IDS_H_
#define KVCANARY_ENGINE_NODES_REQUEST_IDS_H_

#include <atomic>
#include <cstdint>

#include "common/ids.h"

namespace kvcanary::engine {

inline constexpr int kRequestIdCounterBits = 40;
inline constexpr int kRequestIdEpochBits = 23;

// The id of the `n`th request (from 0) of a router whose epoch is `epoch`
// (only its low kRequestIdEpochBits bits are used).
RequestId ComposeRequestId(uint32_t epoch, uint64_t n);
// The epoch an id was given out under.
uint32_t RequestIdEpoch(RequestId id);
// A random epoch (OpenSSL's RAND_bytes, common/random.h).
uint32_t RandomRequestIdEpoch();

// Thread-safe.
class RequestIdSequence {
 public:
  explicit RequestIdSequence(uint32_t epoch = RandomRequestIdEpoch());
  RequestId Next() { return ComposeRequestId(epoch_, next_.fetch_add(1)); }
  uint32_t epoch() const { return epoch_; }

 private:
  const uint32_t epoch_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_REQUEST_IDS_H_
