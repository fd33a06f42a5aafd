// The engine trace wire format (docs/trace-format.md): one event per line,
//
//   kvt1 <type> seq=<u64> ts_us=<u64> node=<role> key=value ...\n
//
// Shared by the engine, which emits it, and the auditor, which replays it into
// a shadow page ledger and re-derives every violation independently. Keys and
// values are [a-z0-9_] tokens or unsigned decimal integers, never free text.
// Encoding is canonical (a fixed field order per type), so
// DecodeTraceLine(EncodeTo(e)) == e and a canonical line re-encodes to itself.
// An unknown type is refused with kDataLoss, never skipped: a new type or
// field is a new version (kvt2), so an auditor never silently misses events.
#ifndef KVCANARY_COMMON_TRACE_EVENT_H_
#define KVCANARY_COMMON_TRACE_EVENT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/ids.h"
#include "common/page_stamp.h"

namespace kvcanary {

enum class TraceEventType : uint8_t {
  kPageAlloc = 1,
  kPageFree = 2,
  kPageWrite = 3,
  kPageRead = 4,
  kViolation = 5,
  kTransferCommit = 6,
  kRequest = 7,
  kDropped = 8,
  kPageShare = 9,
};
// The wire token: "page_alloc", "page_free", ...
const char* TraceEventTypeName(TraceEventType type);

// The trace's own copies of engine enums (common/ cannot depend on engine/).
// TraceScrub, TracePhase and TraceFinishReason list their values in the order
// of engine::ScrubPolicy, engine::RequestPhase and engine::FinishReason; the
// wire carries the tokens, never these numbers.
enum class TraceNode : uint8_t { kRouter, kPrefill, kDecode };
enum class TraceScrub : uint8_t { kNone, kZero, kPoison };
enum class TracePhase : uint8_t {
  kAdmitted,
  kPrefilling,
  kTransferring,
  kDecoding,
  kFinished,
};
enum class TraceFinishReason : uint8_t {
  kNone,
  kStop,
  kLength,
  kTransferred,
  kAbort,
};

// One trace event: a type and a flat set of typed fields. Every event carries
// the header (seq, ts_us, node); the other fields are used per type as listed
// (wire order). Fields a type does not use are ignored by EncodeTo and are
// left at their defaults by DecodeTraceLine; keep them at their defaults so
// that operator== (all fields) means "same line".
struct TraceEvent {
  TraceEventType type = TraceEventType::kDropped;

  // Header, on every event, first on the wire.
  uint64_t seq = 0;    // per node, strictly increasing
  uint64_t ts_us = 0;  // microseconds since the node started
  TraceNode node = TraceNode::kRouter;

  // page_alloc:      page gen tenant request
  // page_free:       page gen tenant request scrub
  // page_write:      page gen tenant request first_slot last_slot_exclusive
  //                  writer_gen
  // page_read:       request tenant page gen slots
  // transfer_commit: request tenant pages_sent pages_expected tokens_sent
  //                  tokens_expected ok
  // request:         request tenant phase reason code
  // violation:       kind layer page slots reader_* writer_* owner_* filled
  //                  (reader, writer, owner: tenant, request, gen)
  // dropped:         count
  // page_share:      page gen tenant request (the page, written by that
  //                  request, is published as the tenant's shared prefix)
  PageId page;
  PageGeneration gen;  // page_read: the generation the reader's table holds
  TenantId tenant;
  RequestId request;
  TraceScrub scrub = TraceScrub::kNone;
  uint32_t first_slot = 0;
  uint32_t last_slot_exclusive = 0;
  PageGeneration writer_gen;  // the generation the writer believed
  uint32_t slots = 0;         // slots read: [0, slots)
  ViolationKind kind = ViolationKind::kUnwrittenRead;
  uint32_t layer = 0;
  StampIdentity reader;
  StampIdentity writer;
  StampIdentity owner;
  uint32_t filled = 0;
  uint32_t pages_sent = 0;
  uint32_t pages_expected = 0;
  uint32_t tokens_sent = 0;
  uint32_t tokens_expected = 0;
  bool ok = false;
  TracePhase phase = TracePhase::kAdmitted;
  TraceFinishReason reason = TraceFinishReason::kNone;  // none unless finished
  absl::StatusCode code = absl::StatusCode::kOk;        // wire: the int value
  uint64_t count = 0;  // dropped: events lost since the last dropped event

  // The encoded line without its newline.
  std::string DebugString() const;

  friend bool operator==(const TraceEvent& a, const TraceEvent& b);
  friend bool operator!=(const TraceEvent& a, const TraceEvent& b) {
    return !(a == b);
  }
};

// Longest accepted line, in bytes, not counting its '\n'.
inline constexpr size_t kMaxTraceLineBytes = 4096;

// A violation event for `v`; the header (seq, ts_us, node) is left for the
// emitter to fill.
TraceEvent FromViolation(const WatermarkViolation& v);
// The violation an event describes. kInvalidArgument unless it is one.
absl::StatusOr<WatermarkViolation> ToViolation(const TraceEvent& event);

// Appends the canonical line for `event`, '\n' included, to *out.
void EncodeTo(const TraceEvent& event, std::string* out);

// Decodes one line, with or without its trailing '\n'. kDataLoss, naming the
// problem, for: a line over kMaxTraceLineBytes, a wrong version prefix, an
// unknown type, a missing, unknown or duplicate field, a value that is not a
// canonical unsigned decimal or is out of range, and a bad enum token. Fields
// may come in any order; EncodeTo always writes the canonical one.
absl::StatusOr<TraceEvent> DecodeTraceLine(absl::string_view line);

// Splits a byte stream, fed in chunks cut anywhere, into decoded events.
// Errors are sticky: after a corrupt or over-long line every later Next()
// returns the same error, since nothing after it can be trusted.
// Not thread-safe; owned by the reading thread.
class TraceLineReader {
 public:
  void Feed(absl::string_view bytes);
  // The next complete event; nullopt until more bytes are fed. kDataLoss for
  // a bad line, or for a partial line already over kMaxTraceLineBytes.
  absl::StatusOr<std::optional<TraceEvent>> Next();
  // At the end of the stream: OK if every byte fed formed a complete line
  // (and no error occurred), else kDataLoss (a truncated last line).
  absl::Status Finish() const;

 private:
  std::string buffer_;  // buffer_[start_, end): bytes of lines not yet read
  size_t start_ = 0;
  size_t scanned_ = 0;  // buffer_[start_, scanned_) holds no '\n'
  uint64_t lines_ = 0;  // complete lines read, for error messages
  absl::Status error_;  // sticky
};

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_TRACE_EVENT_H_
