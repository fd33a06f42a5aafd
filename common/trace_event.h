// The engine trace wire format (docs/trace-format.md): one event per line,
//
//   kvt2 <type> seq=<u64> ts_us=<u64> node=<role> key=value ...\n
//
// Two versions are read: kvt1 and kvt2 (what the engine emits). kvt2 adds
// `writer_shared` to `violation`, and its `page_share` leaves the page's
// writer request as it is (kvt1's stamp said "shared" with an all-ones
// writer request instead). Each event remembers its version, and EncodeTo
// writes that version, so a kvt1 line re-encodes to itself.
//
// Shared by the engine, which emits it, and the auditor, which replays it into
// a shadow page ledger and re-derives every violation independently. Keys and
// values are [a-z0-9_] tokens or unsigned decimal integers, never free text.
// Encoding is canonical (a fixed field order per type), so
// DecodeTraceLine(EncodeTo(e)) == e and a canonical line re-encodes to itself.
// An unknown type is refused with kDataLoss, never skipped: a new type or
// field is a new version, so an auditor never silently misses events.
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

// Trace format versions (TraceEvent::version).
inline constexpr uint8_t kTraceVersion1 = 1;  // "kvt1"
inline constexpr uint8_t kTraceVersion2 = 2;  // "kvt2": writer_shared
inline constexpr uint8_t kTraceVersionLatest = kTraceVersion2;

// One trace event: a type and a flat set of typed fields. Every event carries
// the header (seq, ts_us, node); the other fields are used per type as listed
// (wire order). Fields a type does not use are ignored by EncodeTo and are
// left at their defaults by DecodeTraceLine; keep them at their defaults so
// that operator== (all fields) means "same line".
struct TraceEvent {
  // The format version the event is (or was) a line of: kTraceVersion1 or
  // kTraceVersion2. New events are the latest; DecodeTraceLine sets the
  // line's, and EncodeTo writes it.
  uint8_t version = kTraceVersionLatest;
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
  //                  (reader, writer, owner: tenant, request, gen); kvt2
  //                  adds writer_shared after writer_gen
  // dropped:         count
  // page_share:      page gen tenant request (the page, written by that
  //                  request, is now the tenant's shared prefix; kvt2: the
  //                  writer stays that request, kvt1: it became all ones)
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
  // violation: the writer's bytes are its tenant's shared prefix. On the
  // kvt2 wire; in kvt1 it is implied by writer.request == all ones
  // (kReservedRequestId): decoding derives it, and EncodeTo CHECKs a kvt1
  // violation agrees.
  bool writer_shared = false;
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

// Appends the canonical line for `event` in its version, '\n' included, to
// *out.
void EncodeTo(const TraceEvent& event, std::string* out);

// Decodes one kvt1 or kvt2 line, with or without its trailing '\n', into an
// event of that version. kDataLoss, naming the problem, for: a line over
// kMaxTraceLineBytes, a version prefix other than kvt1 and kvt2, an
// unknown type, a missing, unknown (a kvt2 field in a kvt1 line
// included) or duplicate field, a value that is not a
// canonical unsigned decimal or is out of range, and a bad enum token. Fields
// may come in any order; EncodeTo always writes the canonical one.
absl::StatusOr<TraceEvent> DecodeTraceLine(absl::string_view line);

// Splits a byte stream, fed in chunks cut anywhere, into decoded events.
// Each line may be kvt1 or kvt2 (a stream may mix them).
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
