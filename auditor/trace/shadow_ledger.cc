#include "auditor/trace/shadow_ledger.h"

namespace kvcanary::auditor {

const char* LedgerFindingKindName(LedgerFindingKind kind) {
  switch (kind) {
    case LedgerFindingKind::kForeignTenantRead:
      return "foreign_tenant_read";
    case LedgerFindingKind::kStaleRequestRead:
      return "stale_request_read";
    case LedgerFindingKind::kUnwrittenRead:
      return "unwritten_read";
    case LedgerFindingKind::kLateWrite:
      return "late_write";
    case LedgerFindingKind::kTransferMismatch:
      return "transfer_mismatch";
    case LedgerFindingKind::kEngineViolation:
      return "engine_violation";
  }
  return "unknown";
}

namespace {

LedgerFindingKind FromViolationKind(ViolationKind k) {
  switch (k) {
    case ViolationKind::kForeignTenantRead:
      return LedgerFindingKind::kForeignTenantRead;
    case ViolationKind::kStaleRequestRead:
      return LedgerFindingKind::kStaleRequestRead;
    case ViolationKind::kUnwrittenRead:
      return LedgerFindingKind::kUnwrittenRead;
    case ViolationKind::kLateWrite:
      return LedgerFindingKind::kLateWrite;
  }
  return LedgerFindingKind::kUnwrittenRead;
}

}  // namespace

ShadowLedger::PageState& ShadowLedger::State(TraceNode node, PageId page) {
  return pages_[Key{static_cast<int>(node), page.value()}];
}

void ShadowLedger::Report(LedgerFinding f, std::vector<LedgerFinding>* out) {
  const auto key =
      std::make_tuple(f.reader.request.value(), static_cast<int>(f.node),
                      f.page.value(), static_cast<int>(f.kind));
  if (f.kind != LedgerFindingKind::kTransferMismatch &&
      !reported_.insert(key).second) {
    return;
  }
  findings_.push_back(f);
  out->push_back(f);
}

void ShadowLedger::NoteRequest(RequestId request, TenantId tenant) {
  if (request == kNoRequest || request == kReservedRequestId ||
      tenant == kNoTenant) {
    return;
  }
  request_tenants_[request.value()] = tenant.value();
}

void ShadowLedger::ApplyPageWrite(const TraceEvent& e,
                                  std::vector<LedgerFinding>* out) {
  PageState& s = State(e.node, e.page);
  const StampIdentity writer{e.request, e.tenant, e.writer_gen};
  if (!s.known) {
    // Whose bytes the page held is unknown; a write from slot 0 makes
    // the writer's own slots known again.
    if (e.first_slot != 0) return;
    s.known = true;
    s.content.writer = StampIdentity{};
    s.content.set_shared(false);
    s.content.prior = StampIdentity{};
    s.content.prior_filled = 0;
  }
  s.content.owner = s.owner;
  const auto late =
      StampWrite(&s.content, writer, e.first_slot, e.last_slot_exclusive);
  // A kvt1 engine installed a transferred shared prefix as a write by the
  // all-ones request: that write is the shared marker.
  if (e.version == kTraceVersion1 && writer.request == kReservedRequestId &&
      s.content.writer == writer) {
    s.content.set_shared(true);
  }
  if (late.has_value() && s.gen.value() != 0) {
    LedgerFinding f;
    f.kind = LedgerFindingKind::kLateWrite;
    f.node = e.node;
    f.page = e.page;
    f.reader = s.owner;
    f.writer = writer;
    f.slots = e.last_slot_exclusive - e.first_slot;
    Report(f, out);
  }
}

void ShadowLedger::ApplyPageShare(const TraceEvent& e) {
  PageState& s = State(e.node, e.page);
  if (!s.known || s.content.writer.tenant != e.tenant) return;
  if (e.version == kTraceVersion1) {
    // kvt1: the engine restamped the writer request as all ones.
    s.content.writer.request = kReservedRequestId;
  } else if (s.content.writer.request != e.request) {
    // kvt2 names the writer, which stays: if the ledger saw another one,
    // the page holds bytes the engine does not mean to share.
    return;
  }
  s.content.set_shared(true);
}

void ShadowLedger::ApplyPageRead(const TraceEvent& e,
                                 std::vector<LedgerFinding>* out) {
  PageState& s = State(e.node, e.page);
  if (!s.known) {
    ++stats_.reads_unchecked;
    return;
  }
  ++stats_.reads_checked;
  ++stats_.reads_checked_by_tenant[e.tenant.value()];
  if (checked_requests_.insert(e.request.value()).second) {
    ++stats_.requests_checked_by_tenant[e.tenant.value()];
  }
  const StampIdentity reader{e.request, e.tenant, e.gen};
  StampIdentity source;
  bool source_shared = false;
  const auto kind =
      ClassifyRead(s.content, reader, e.slots, &source, &source_shared);
  if (!kind.has_value()) return;
  LedgerFinding f;
  f.kind = FromViolationKind(*kind);
  f.node = e.node;
  f.page = e.page;
  f.reader = reader;
  f.writer = source;
  f.writer_shared = source_shared;
  f.slots = e.slots;
  Report(f, out);
}

void ShadowLedger::ApplyPageAlloc(const TraceEvent& e) {
  PageState& s = State(e.node, e.page);
  s.gen = e.gen;
  s.owner = StampIdentity{e.request, e.tenant, e.gen};
  s.content.owner = s.owner;
}

void ShadowLedger::ApplyPageFree(const TraceEvent& e) {
  PageState& s = State(e.node, e.page);
  if (e.scrub != TraceScrub::kNone) {
    s.content.writer = StampIdentity{};
    s.content.filled = 0;
    s.content.set_shared(false);
    s.content.prior = StampIdentity{};
    s.content.prior_filled = 0;
    s.known = true;  // scrubbed: known to hold nobody's bytes
  }
}

void ShadowLedger::ApplyTransferCommit(const TraceEvent& e,
                                       std::vector<LedgerFinding>* out) {
  if (e.ok) return;
  LedgerFinding f;
  f.kind = LedgerFindingKind::kTransferMismatch;
  f.node = e.node;
  f.reader = StampIdentity{e.request, e.tenant, PageGeneration()};
  f.pages_sent = e.pages_sent;
  f.pages_expected = e.pages_expected;
  Report(f, out);
}

void ShadowLedger::ApplyViolation(const TraceEvent& e,
                                  std::vector<LedgerFinding>* out) {
  LedgerFinding f;
  f.kind = LedgerFindingKind::kEngineViolation;
  f.engine_kind = e.kind;
  f.node = e.node;
  f.page = e.page;
  f.reader = e.reader;
  f.writer = e.writer;
  f.writer_shared = e.writer_shared;
  f.slots = e.slots;
  // One per (reader request, page, engine kind).
  const auto key =
      std::make_tuple(e.reader.request.value(), static_cast<int>(e.node) + 16,
                      e.page.value(), static_cast<int>(e.kind));
  if (reported_.insert(key).second) {
    findings_.push_back(f);
    out->push_back(f);
  }
}

void ShadowLedger::ApplyDropped(const TraceEvent& e) {
  stats_.dropped += e.count;
  for (auto& [key, s] : pages_) {
    if (key.first == static_cast<int>(e.node)) s.known = false;
  }
}

std::vector<LedgerFinding> ShadowLedger::Apply(const TraceEvent& e,
                                               int64_t now_unix_us) {
  std::vector<LedgerFinding> out;
  ++stats_.events;
  switch (e.type) {
    case TraceEventType::kPageAlloc:
      NoteRequest(e.request, e.tenant);
      ApplyPageAlloc(e);
      break;
    case TraceEventType::kPageFree:
      ApplyPageFree(e);
      break;
    case TraceEventType::kPageWrite:
      NoteRequest(e.request, e.tenant);
      ApplyPageWrite(e, &out);
      break;
    case TraceEventType::kPageShare:
      ApplyPageShare(e);
      break;
    case TraceEventType::kPageRead:
      NoteRequest(e.request, e.tenant);
      ApplyPageRead(e, &out);
      break;
    case TraceEventType::kTransferCommit:
      NoteRequest(e.request, e.tenant);
      ApplyTransferCommit(e, &out);
      break;
    case TraceEventType::kViolation:
      ApplyViolation(e, &out);
      break;
    case TraceEventType::kDropped:
      ApplyDropped(e);
      break;
    case TraceEventType::kRequest:
      NoteRequest(e.request, e.tenant);
      break;
  }
  // Where and when: the same on every finding this event caused, in
  // findings_ (its tail) and in `out`.
  for (size_t i = 0; i < out.size(); ++i) {
    for (LedgerFinding* f :
         {&out[i], &findings_[findings_.size() - out.size() + i]}) {
      f->event_seq = e.seq;
      f->event_ts_us = e.ts_us;
      f->seen_unix_us = now_unix_us;
    }
  }
  return out;
}

}  // namespace kvcanary::auditor
