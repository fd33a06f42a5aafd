// KV-cache events and pairs built for the kv_events tests: FakeEvents by
// type and tier, and PairBuilder, which ingests them into a ledger as a
// pair's plant, probe and control spans (auditor/kv_events/pair_decision.h).
#ifndef KVCANARY_TESTS_AUDITOR_KV_EVENTS_PAIR_BUILDER_H_
#define KVCANARY_TESTS_AUDITOR_KV_EVENTS_PAIR_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/pair_decision.h"
#include "auditor/kv_events/wire.h"
#include "tests/auditor/fakes/fake_kv_publisher.h"

namespace kvcanary::auditor::testing {

inline FakeEvent Stored(std::vector<uint64_t> hashes,
                        std::optional<uint64_t> parent, int64_t first_token) {
  FakeEvent e;
  e.hashes = std::move(hashes);
  e.parent = parent;
  for (size_t i = 0; i < e.hashes.size() * 4; ++i) {
    e.token_ids.push_back(first_token + static_cast<int64_t>(i));
  }
  return e;
}

inline FakeEvent Cleared() {
  FakeEvent e;
  e.type = "AllBlocksCleared";
  return e;
}

inline FakeEvent Removed(std::vector<uint64_t> hashes) {
  FakeEvent e;
  e.type = "BlockRemoved";
  e.hashes = std::move(hashes);
  return e;
}

// The same events published by a second tier ("CPU", as vLLM's offload
// names it; "CPU_PINNED" for SGLang's HiCache).
inline FakeEvent In(const std::string& medium, FakeEvent e) {
  e.medium = medium;
  return e;
}

// Builds the three spans of a pair from batches ingested into a ledger.
class PairBuilder {
 public:
  void Plant(const std::vector<FakeEvent>& e) {
    m0_ = Add(e);
    m1_ = ledger_.Now();
  }
  void Probe(const std::vector<FakeEvent>& e) {
    Add(e);
    m2_ = ledger_.Now();
  }
  void Control(const std::vector<FakeEvent>& e) { Add(e); }
  // The eviction step's events, after the plant's: they join the plant span.
  void Evict(const std::vector<FakeEvent>& e) {
    evicted_ = true;
    evict_from_ = m1_;
    Add(e);
    m1_ = ledger_.Now();
  }
  void Gap() {
    ledger_.RecordGap(seq_, seq_, false, 0);
    ++seq_;
  }
  void Restart() {
    ledger_.RecordRestart(seq_ - 1, 0, 0);
    seq_ = 0;
  }
  kv_events::PairObservation Observe(int cached = -1, double ttft = 10,
                                     double control_ttft = 10,
                                     int control_cached = -1) {
    kv_events::PairObservation o;
    const kv_events::Mark end = ledger_.Now();
    o.plant = ledger_.Between(m0_, m1_);
    o.probe = ledger_.Between(m1_, m2_);
    o.after = ledger_.Between(m1_, end);
    o.control = ledger_.Between(m2_, end);
    o.plant_ok = o.probe_ok = o.control_ok = true;
    o.probe_cached_tokens = cached;
    o.control_cached_tokens = control_cached;
    o.probe_ttft_ms = ttft;
    o.control_ttft_ms = control_ttft;
    o.evicted = evicted_;
    o.evict_from = evict_from_;
    return o;
  }

 private:
  kv_events::Mark Add(const std::vector<FakeEvent>& e) {
    const kv_events::Mark m = ledger_.Now();
    if (!e.empty()) {
      ledger_.Ingest(seq_++, *kv_events::DecodeBatch(EncodeBatch(e)), 0);
    }
    return m;
  }
  kv_events::Ledger ledger_;
  int64_t seq_ = 0;
  kv_events::Mark m0_, m1_, m2_;
  bool evicted_ = false;
  kv_events::Mark evict_from_;
};

}  // namespace kvcanary::auditor::testing

#endif  // KVCANARY_TESTS_AUDITOR_KV_EVENTS_PAIR_BUILDER_H_
