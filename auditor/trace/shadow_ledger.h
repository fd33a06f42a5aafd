// The shadow page ledger: replays an engine node's trace stream (page
// alloc / write / share / free, reads, transfer commits; docs/trace-format.md)
// into its own record of who owns each page and whose bytes are in it, and
// flags every read of a page whose content another tenant or request wrote.
//
// It re-derives the verdicts from the page lifecycle alone, independently of
// the engine's own stamp check: it works with watermarks `off`, and a
// `violation` event the engine reports is counted separately
// (kEngineViolation), never used to decide a shadow finding. The classifying
// rules are the watermark's (common/page_stamp.h ClassifyRead), applied to
// the ledger's state instead of the page's stamp.
//
// It reads kvt1 and kvt2 events alike. A `page_share` marks the page's
// content as its tenant's shared prefix: in kvt2 the writer stays the real
// request that computed it (so a finding on it names that request, with
// writer_shared set); in kvt1 the writer request becomes all ones, as kvt1
// engines restamped it, so kvt1 findings read exactly as they always did.
//
// After a `dropped` event the ledger no longer knows what it missed: every
// page of that node becomes unknown until it is next written from slot 0 or
// scrubbed, and reads of unknown pages are counted as unchecked, never
// flagged. Pages first seen mid-life start unknown the same way.
//
// Memory grows with the pages and the requests seen (request_tenants(),
// the per-request read accounting): one ledger per audit run.
//
// Not thread-safe.
#ifndef KVCANARY_AUDITOR_TRACE_SHADOW_LEDGER_H_
#define KVCANARY_AUDITOR_TRACE_SHADOW_LEDGER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/page_stamp.h"
#include "common/trace_event.h"

namespace kvcanary::auditor {

enum class LedgerFindingKind {
  kForeignTenantRead,  // read of bytes another tenant wrote (the leak)
  kStaleRequestRead,   // read of bytes another request of the tenant wrote
  kUnwrittenRead,      // read of slots nobody wrote in this generation
  kLateWrite,          // a write for an older generation of the page landed
  kTransferMismatch,   // a transfer committed with pages/tokens != expected
  kEngineViolation,    // the engine's own check reported a violation
};
const char* LedgerFindingKindName(LedgerFindingKind kind);

struct LedgerFinding {
  LedgerFindingKind kind = LedgerFindingKind::kUnwrittenRead;
  TraceNode node = TraceNode::kDecode;
  PageId page;
  StampIdentity reader;  // who read (or owned the page a late write hit)
  StampIdentity writer;  // whose bytes (or who wrote late)
  // The writer's bytes were its tenant's shared prefix (published to the
  // prefix cache); the writer is still the request that computed them in
  // kvt2 streams (all ones in kvt1 ones).
  bool writer_shared = false;
  uint32_t slots = 0;                           // slots read / written
  uint32_t pages_sent = 0, pages_expected = 0;  // kTransferMismatch
  // kEngineViolation: the engine's kind.
  ViolationKind engine_kind = ViolationKind::kUnwrittenRead;
  // The event that caused the finding: its seq and ts_us (the node's clock,
  // microseconds since it started).
  uint64_t event_seq = 0;
  uint64_t event_ts_us = 0;
  // When the ledger applied that event: the now_unix_us given to Apply()
  // (microseconds since the Unix epoch; 0 if none was given).
  int64_t seen_unix_us = 0;
};

struct LedgerStats {
  uint64_t events = 0;
  uint64_t dropped = 0;  // events the node said this reader lost
  uint64_t reads_checked = 0;
  uint64_t reads_unchecked = 0;  // of pages unknown after a drop
  // Coverage by reader tenant (the engine's tenant id): page reads checked,
  // and distinct reader requests with at least one read checked.
  absl::flat_hash_map<uint32_t, uint64_t> reads_checked_by_tenant;
  absl::flat_hash_map<uint32_t, uint64_t> requests_checked_by_tenant;
};

class ShadowLedger {
 public:
  // Applies one event (kvt1 or kvt2); returns the findings it causes (also
  // kept, see findings()), each stamped with the event's seq and ts_us and
  // with `now_unix_us` as seen_unix_us. A read is flagged once per (reader
  // request, page, kind).
  std::vector<LedgerFinding> Apply(const TraceEvent& event,
                                   int64_t now_unix_us = 0);

  const std::vector<LedgerFinding>& findings() const { return findings_; }
  const LedgerStats& stats() const { return stats_; }
  // Engine request id -> engine tenant id, for every request named by a
  // request, page_alloc, page_write, page_read or transfer_commit event
  // (request 0, tenant 0 and kvt1's all-ones shared-prefix writer are not
  // requests and are left out).
  const absl::flat_hash_map<uint64_t, uint32_t>& request_tenants() const {
    return request_tenants_;
  }

 private:
  struct PageState {
    // Whether the ledger knows whose bytes the page holds: false for a page
    // first seen mid-life (its earlier writes happened before this reader
    // subscribed) and after a drop, until a write from slot 0 or a scrub.
    bool known = false;
    PageGeneration gen;
    StampIdentity owner;
    PageStamp content;  // writer, filled, prior as the ledger derives them
  };
  using Key = std::pair<int, uint32_t>;  // (node, page)
  PageState& State(TraceNode node, PageId page);
  void Report(LedgerFinding f, std::vector<LedgerFinding>* out);
  void NoteRequest(RequestId request, TenantId tenant);
  // One event of each type, less NoteRequest; findings go to *out too.
  void ApplyPageAlloc(const TraceEvent& e);
  void ApplyPageWrite(const TraceEvent& e, std::vector<LedgerFinding>* out);
  void ApplyPageShare(const TraceEvent& e);
  void ApplyPageRead(const TraceEvent& e, std::vector<LedgerFinding>* out);
  void ApplyPageFree(const TraceEvent& e);
  void ApplyTransferCommit(const TraceEvent& e,
                           std::vector<LedgerFinding>* out);
  // The engine's own finding, kept apart from the ledger's (kEngineViolation).
  void ApplyViolation(const TraceEvent& e, std::vector<LedgerFinding>* out);
  // A drop: every page of the node becomes unknown.
  void ApplyDropped(const TraceEvent& e);

  absl::flat_hash_map<Key, PageState> pages_;
  absl::flat_hash_set<std::tuple<uint64_t, int, uint32_t, int>> reported_;
  std::vector<LedgerFinding> findings_;
  LedgerStats stats_;
  absl::flat_hash_map<uint64_t, uint32_t> request_tenants_;
  absl::flat_hash_set<uint64_t> checked_requests_;  // readers with a check
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TRACE_SHADOW_LEDGER_H_
