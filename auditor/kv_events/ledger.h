// The shadow ledger of cached blocks for an engine we did not write: what
// its KV-cache event stream (auditor/kv_events/wire.h) said, in the order
// it said it, with every sequence gap and publisher restart on the record,
// so a reader can tell a window it saw whole from one it did not. Keeps
// only hashes and counts: the engine's block hashes, and of each stored
// block's token ids a digest keyed with a random key drawn per ledger (it
// matches the same tokens within this run and means nothing outside it).
// Each entry also keeps the event's storage medium (vLLM's and SGLang's
// `medium`: "GPU" for the prefix cache, "CPU", "CPU_PINNED", "DISK", … for a
// second tier such as an offload connector or HiCache), as a one-byte enum
// so that millions of entries cost nothing more: the pairs tell a block
// moved to a second tier from one that was lost by it.
//
// Thread-safe: the subscriber thread writes, probes read.
#ifndef KVCANARY_AUDITOR_KV_EVENTS_LEDGER_H_
#define KVCANARY_AUDITOR_KV_EVENTS_LEDGER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "auditor/kv_events/wire.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor::kv_events {

// A position in the ledger: everything ingested before it.
struct Mark {
  uint64_t index = 0;   // entries ingested so far (never reset)
  int epoch = 0;        // publisher starts seen (0: none yet)
  int64_t seq = -1;     // the last sequence number ingested in `epoch`
  uint64_t breaks = 0;  // breaks recorded so far
};

// The medium an event names. Unknown names are kOther (the stream is
// untrusted: a name is never kept as a string per entry).
enum class Medium : uint8_t {
  kNone,  // absent (older engines): the prefix cache itself
  kGpu,
  kCpu,
  kCpuPinned,  // SGLang HiCache's host tier
  kDisk,
  kStorage,
  kExternal,
  kOther,
};
Medium ParseMedium(absl::string_view name);
const char* MediumName(Medium m);  // "" for kNone
// The first tier is the prefix cache the engine serves from ("GPU", or no
// medium at all); every other medium is a second tier behind it.
inline bool FirstTier(Medium m) {
  return m == Medium::kNone || m == Medium::kGpu;
}

struct BlockEntry {
  EventType type = EventType::kBlockStored;
  Medium medium = Medium::kNone;    // fits in the padding after `type`
  BlockHash hash;                   // none for AllBlocksCleared
  std::optional<BlockHash> parent;  // BlockStored: the block before
  // BlockStored: a digest of the block's token ids (0 with none reported
  // or not block_size of them).
  uint64_t token_digest = 0;
  int64_t block_size = 0;
  int epoch = 0;
  int64_t seq = 0;
  int64_t recv_us = 0;
};

// Something that makes a window not whole.
struct Break {
  enum Kind { kGap, kRestart, kUndecodable, kTruncated } kind = kGap;
  int epoch = 0;
  int64_t from_seq = 0, to_seq = 0;  // the missing ones (kGap, kUndecodable)
  bool recovered = false;            // kGap: replayed in full
  int64_t at_us = 0;
  std::string detail;
  nlohmann::json ToJson() const;
};

struct LedgerStats {
  int64_t messages = 0, events = 0, stored_blocks = 0, removed_blocks = 0,
          cleared = 0, unknown_events = 0, array_events = 0, map_events = 0;
  int64_t gaps = 0, gaps_recovered = 0, missing_messages = 0, restarts = 0,
          undecodable = 0, replayed_messages = 0, dropped_entries = 0;
  nlohmann::json ToJson() const;
};

// What the ledger holds after a mark.
struct Span {
  Mark from, to;
  std::vector<BlockEntry> entries;  // in stream order
  std::vector<Break> breaks;        // unrecovered gaps, restarts, … in it
  bool truncated = false;  // entries before `from` were dropped already
  // Whether nothing is missing from the span: no break but recovered gaps.
  bool whole() const;
};

class Ledger {
 public:
  // Keeps at most `max_entries` block entries (the oldest half is dropped
  // past it; a span reaching into them is truncated, so not whole).
  explicit Ledger(size_t max_entries = 4000000);

  // A decoded message `seq` of the publisher's current epoch (the
  // subscriber ingests in sequence order).
  void Ingest(int64_t seq, const Batch& batch, int64_t recv_us);
  // Messages [from, to] of the current epoch: missing for good
  // (recovered=false) or found again by replay (true; ingested already).
  void RecordGap(int64_t from, int64_t to, bool recovered, int64_t at_us);
  // A message that did not decode: missing for good.
  void RecordUndecodable(int64_t seq, const std::string& why, int64_t at_us);
  // The publisher started again: sequence numbers restart at `seq`.
  void RecordRestart(int64_t last_seq, int64_t seq, int64_t at_us);
  void CountReplayed(int64_t n);

  Mark Now() const;
  // Everything after `from` up to now.
  Span Since(const Mark& from) const;
  // Everything after `from` and before `to` (a later mark).
  Span Between(const Mark& from, const Mark& to) const;
  LedgerStats stats() const;
  // The digest this ledger gives the token ids of one block.
  uint64_t Digest(const int64_t* tokens, size_t n) const;

 private:
  void Append(BlockEntry e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddBreak(Break b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_entries_;
  const uint64_t digest_key_;
  mutable absl::Mutex mu_;
  std::deque<BlockEntry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t first_index_ ABSL_GUARDED_BY(mu_) = 0;  // of entries_.front()
  std::vector<Break> breaks_ ABSL_GUARDED_BY(mu_);
  Mark now_ ABSL_GUARDED_BY(mu_);
  LedgerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvcanary::auditor::kv_events

#endif  // KVCANARY_AUDITOR_KV_EVENTS_LEDGER_H_
