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
// After a `dropped` event the ledger no longer knows what it missed: every
// page of that node becomes unknown until it is next written from slot 0 or
// scrubbed, and reads of unknown pages are counted as unchecked, never
// flagged. Pages first seen mid-life start unknown the same way.
//
// Not thread-safe.
#ifndef KVCANARY_AUDITOR_SHADOW_LEDGER_H_
#define KVCANARY_AUDITOR_SHADOW_LEDGER_H_

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
  uint32_t slots = 0;    // slots read / written
  uint32_t pages_sent = 0, pages_expected = 0;  // kTransferMismatch
  // kEngineViolation: the engine's kind.
  ViolationKind engine_kind = ViolationKind::kUnwrittenRead;
};

struct LedgerStats {
  uint64_t events = 0;
  uint64_t dropped = 0;  // events the node said this reader lost
  uint64_t reads_checked = 0;
  uint64_t reads_unchecked = 0;  // of pages unknown after a drop
};

class ShadowLedger {
 public:
  // Applies one event; returns the findings it causes (also kept, see
  // findings()). A read is flagged once per (reader request, page, kind).
  std::vector<LedgerFinding> Apply(const TraceEvent& event);

  const std::vector<LedgerFinding>& findings() const { return findings_; }
  const LedgerStats& stats() const { return stats_; }

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

  absl::flat_hash_map<Key, PageState> pages_;
  absl::flat_hash_set<std::tuple<uint64_t, int, uint32_t, int>> reported_;
  std::vector<LedgerFinding> findings_;
  LedgerStats stats_;
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_SHADOW_LEDGER_H_
