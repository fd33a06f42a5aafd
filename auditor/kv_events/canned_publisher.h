// A KV-cache event publisher of canned batches, on loopback, in vLLM's
// framing (topic, 8-byte big-endian sequence, msgpack batch of map-shaped
// BlockStored events; docs/kv-events-wire.md) with a replay socket: what
// the kv_events detector's positive control streams to the real Subscriber
// and Ledger, so the control reads its pair the way a campaign reads an
// engine's.
//
// Thread-safe.
#ifndef KVCANARY_AUDITOR_KV_EVENTS_CANNED_PUBLISHER_H_
#define KVCANARY_AUDITOR_KV_EVENTS_CANNED_PUBLISHER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace kvcanary::auditor::kv_events {

// One BlockStored event: blocks of block_size tokens each, chained in
// order, the first to `parent` (none: a prompt's first block).
struct CannedStore {
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::vector<int64_t> token_ids;  // hashes.size() × block_size
  int64_t block_size = 4;
};

// The msgpack payload [ts, [events...], 0] of `events`, map-shaped.
std::string EncodeStoredBatch(const std::vector<CannedStore>& events);

class CannedPublisher {
 public:
  CannedPublisher();
  ~CannedPublisher();  // stops serving replays
  CannedPublisher(const CannedPublisher&) = delete;
  CannedPublisher& operator=(const CannedPublisher&) = delete;

  // Binds the PUB and replay ROUTER sockets on 127.0.0.1, any free ports.
  absl::Status Start();
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  // Sends `payload` as the next message (kept for replay); its sequence.
  int64_t Publish(const std::string& payload);

 private:
  struct Sockets;
  void ServeReplay();

  std::unique_ptr<Sockets> sockets_;
  std::string endpoint_, replay_endpoint_;
  absl::Mutex mu_;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::string> sent_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvcanary::auditor::kv_events

#endif  // KVCANARY_AUDITOR_KV_EVENTS_CANNED_PUBLISHER_H_
