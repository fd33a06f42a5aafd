// Fault switches: each reproduces the mechanism of a known production bug
// class (../shared/design/INCIDENTS.md, docs/faults.md), so detection is
// tested against the real failure, not a shortcut that writes a violation
// directly. All are off by default; `--fault=NAME[,NAME]` on a node turns
// them on; `kvcanary-engine faults` lists them.
#ifndef KVCANARY_ENGINE_CORE_FAULTS_H_
#define KVCANARY_ENGINE_CORE_FAULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary::engine {

enum class Fault : uint32_t {
  // An over-long prompt is rejected into a field the queues never read: the
  // router leaves the length check to the prefill node, whose abort is lost;
  // prefill runs a one-token placeholder and ships one page; decode takes
  // the transfer's word for it and attends over every page it reserved.
  kAdmissionAbortLost = 1u << 0,
  // Prefill and decode disagree on length: prefill counts the pages to ship
  // with a floor (dropping a partial last page), and decode commits on the
  // sender's "success" without comparing what arrived with what it reserved.
  kPageCountMismatch = 1u << 1,
  // The decode node's receiver writes K/V straight into the pages it
  // reserved as frames arrive (as an RDMA transfer engine does), and an
  // abort (timeout, disconnect) frees those pages at once instead of
  // holding them until the writer is done: late writes land on the pages'
  // next owners.
  kAbortTransferRace = 1u << 2,
  // Freed pages are handed out unscrubbed whatever --scrub says, and decode
  // attention reads the whole last page, past what the request has written:
  // the tail holds the previous occupant's K/V.
  kNoScrubReuse = 1u << 3,
  // The decode node's metadata slots (first token, request id, the staged
  // K/V) are taken round-robin with no ownership, and the consumer does not
  // compare the id echoed in the slot: a slot overwritten before it is
  // consumed starts the request from another request's token and K/V.
  kMetadataSlotReuse = 1u << 4,
  // The prefix cache key is a 32-bit FNV-1a hash of the page's tokens with a
  // constant seed: no tenant salt, no SHA-256. Another tenant's identical
  // (or colliding) prefix is served from the first tenant's cached pages.
  kPrefixHashCollision = 1u << 5,
  // An aborted request's prompt pages are published into the prefix cache
  // as if computed, whatever was written into them (SGLang caching an
  // aborted request's KV): the decode node's reservation for a transfer
  // that never arrived becomes cached prefix that a later reservation of
  // the same prefix reads instead of the transferred K/V.
  kAbortCacheInsert = 1u << 6,
  // A failed KV transfer is not failed: the decode node installs the
  // request as computed over the pages it reserved, which still hold their
  // previous occupants' K/V, with the first token its metadata slot kept
  // from the slot's previous request, and answers 200.
  kStaleTransferRef = 1u << 7,
  // The router's keep-alive pool to the decode nodes takes back the
  // connection of a request given up after it was sent and before its
  // answer came, as it is, and hands it out without looking for bytes on
  // it: the next request on it reads the given-up request's answer as its
  // own, and every later one on it the answer before its own.
  kCancelReuseChannel = 1u << 8,
  // The host tier keys the pages it holds by a hash of their tokens alone,
  // without the tenant or cache_salt the prefix cache salts its keys with
  // (an offloading connector that drops the salt): another tenant's
  // identical prefix promotes the first tenant's spilled page.
  kTierDropsSalt = 1u << 9,
  // Batched sampling takes the wrong row (a public server's speculative
  // decoding, late 2024: each slot sampled after the previous slot's
  // speculative batch had run on the shared context): when a sequence
  // joins a decode batch of two or more, the next R decode steps with two
  // or more sequences give sequence k of the step's B decoding sequences
  // the token (and log-probabilities) sampled from row (k + 1) mod B of
  // the step's logits. No page is read across owners, so no watermark sees
  // it; any concurrent request contaminates, the same tenant's included.
  kSampleWrongRow = 1u << 10,
};

struct FaultInfo {
  Fault fault;
  const char* name;
  const char* description;
};
const std::vector<FaultInfo>& AllFaults();

// A set of faults. Plain value; thread-safe to read.
class FaultSet {
 public:
  FaultSet() = default;
  // "a,b" -> set; "" or "none" -> empty; kInvalidArgument naming an unknown
  // fault.
  static absl::StatusOr<FaultSet> Parse(absl::string_view names);
  bool has(Fault f) const { return (bits_ & static_cast<uint32_t>(f)) != 0; }
  void add(Fault f) { bits_ |= static_cast<uint32_t>(f); }
  bool empty() const { return bits_ == 0; }
  std::string ToString() const;  // "a,b" or "none"

 private:
  uint32_t bits_ = 0;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_FAULTS_H_
