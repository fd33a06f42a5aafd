// The watermark: a stamp at the head of every KV page of every layer, in the
// same buffer as the page's K/V data, so it travels with the bytes through any
// copy or network transfer. Shared by the engine (which writes and checks it)
// and the auditor (whose shadow ledger re-derives the same verdicts).
//
//   owner  — set by the page pool at allocation: tenant, request, generation
//            (the generation is bumped on every allocation of the page).
//   writer — set by whoever writes K/V into the page: tenant, request, the
//            generation it believed it was writing, and `filled`, the number
//            of leading slots it has written.
//
// A read of slot s is legitimate only if writer == the reader's identity and
// generation and s < filled. Wire encoding: docs/watermarks.md.
//
// Two refinements:
//   prior  — when a new writer takes a page over (a write from slot 0) the
//            identity it displaced is kept, with how far that one had
//            filled: slots [filled, prior_filled) still hold the prior
//            writer's bytes, so a read past `filled` is attributed to the
//            tenant whose data it is. Scrubbing clears it. In memory only.
//   shared — a page published to the prefix cache keeps its real writer
//            (tenant, request, generation) and gets the kStampShared flag:
//            any request of the writer's tenant may read it in that
//            allocation (reader generation == writer generation); other
//            tenants may not, and a violation still names the writer.
#ifndef KVCANARY_COMMON_PAGE_STAMP_H_
#define KVCANARY_COMMON_PAGE_STAMP_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/ids.h"

namespace kvcanary {

// No request has this id (2^64 - 1): the node APIs answer 400 for it and
// the KV frame decoder refuses a Metadata frame naming it. It once meant
// "the tenant's shared prefix" in a stamp's writer request (kvt1 traces
// still say so); the shared flag (kStampShared) means that now.
inline constexpr RequestId kReservedRequestId{~0ull};

// PageStamp::flags bits. Every other bit is zero; Decode refuses others.
// kStampShared: the writer's content is its tenant's shared prefix
// (published to the prefix cache, or installed from such a page).
inline constexpr uint32_t kStampShared = 1u << 0;
inline constexpr uint32_t kStampKnownFlags = kStampShared;

enum class WatermarkMode : uint8_t {
  kOff = 0,      // no checks (to measure their cost)
  kDetect = 1,   // record violations, serve the request (auditing)
  kEnforce = 2,  // record and fail the request; the default
};
const char* WatermarkModeName(WatermarkMode mode);
absl::StatusOr<WatermarkMode> ParseWatermarkMode(absl::string_view name);

enum class ViolationKind : uint8_t {
  kForeignTenantRead = 1,  // content written by another tenant (the leak)
  kStaleRequestRead = 2,   // content from another request of the same tenant
  kUnwrittenRead = 3,      // slot never written in this generation
  kLateWrite = 4,          // a write stamped with an older generation landed
};
const char* ViolationKindName(ViolationKind kind);

// Who: a tenant, one of its requests, and the page generation it holds.
// Field order keeps the struct at 16 bytes.
struct StampIdentity {
  RequestId request;
  TenantId tenant;
  PageGeneration generation;

  friend bool operator==(const StampIdentity& a, const StampIdentity& b) {
    return a.tenant == b.tenant && a.request == b.request &&
           a.generation == b.generation;
  }
  friend bool operator!=(const StampIdentity& a, const StampIdentity& b) {
    return !(a == b);
  }
};

// In-memory layout of the stamp at the head of a page buffer. Plain data:
// copying the page copies the stamp.
struct PageStamp {
  static constexpr uint32_t kMagic = 0x4B564353;  // "KVCS"
  // 2: the flags word (shared prefix) joined the wire encoding.
  static constexpr uint16_t kVersion = 2;
  // Encoded size on the wire (docs/watermarks.md).
  static constexpr size_t kEncodedSizeBytes = 52;

  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t layer = 0;
  PageId page;
  uint32_t flags = 0;  // kStampShared; fills what was padding before owner
  StampIdentity owner;
  StampIdentity writer;  // tenant kNoTenant: never written
  uint32_t filled = 0;   // leading slots written by `writer`
  // Memory only (not encoded on the wire): the writer `writer` took the page
  // over from (tenant kNoTenant: none, or scrubbed since) and how many
  // leading slots it had filled.
  uint32_t prior_filled = 0;
  StampIdentity prior;

  // Whether the writer's content is its tenant's shared prefix.
  bool shared() const { return (flags & kStampShared) != 0; }
  void set_shared(bool shared) {
    flags = shared ? (flags | kStampShared) : (flags & ~kStampShared);
  }

  // Appends the little-endian wire encoding (kEncodedSizeBytes) to *out.
  void EncodeTo(std::string* out) const;
  // kDataLoss for a short buffer, a bad magic, an unknown version (1
  // included: its layout has no flags) or an unknown flag bit.
  static absl::StatusOr<PageStamp> Decode(absl::string_view in);
};

// Whether `stamp`'s content may be read by any request of its writer's
// tenant holding the page at `generation`: it is shared, and shared in
// that allocation (the same bytes found in a later allocation of the page
// are an earlier request's).
inline bool SharedAt(const PageStamp& stamp, PageGeneration generation) {
  return stamp.shared() && stamp.writer.generation == generation;
}

// Verdict for a read of slots [0, slots_read) of a page whose stamp is
// `stamp`, by `reader` (tenant, request, and the generation its block table
// recorded for the page). nullopt: legitimate. Checked in this order, so a
// verdict names the worst thing that happened:
//   never written                    -> kUnwrittenRead
//   writer tenant != reader tenant   -> kForeignTenantRead
//   writer request != reader request -> kStaleRequestRead
//     (unless SharedAt(stamp, reader generation): the page is its tenant's
//     shared prefix in this allocation)
//   writer generation != reader's    -> kLateWrite
//   slots_read > filled, and the prior writer's bytes are there
//   (prior_filled > filled):
//     prior tenant != reader tenant  -> kForeignTenantRead
//     prior request != reader request -> kStaleRequestRead
//   slots_read > filled              -> kUnwrittenRead
// *source (optional): whose bytes the verdict is about — the writer, or the
// prior writer for the two tail verdicts. *source_shared (optional): whether
// those bytes are marked shared (the writer's flag; false for the prior,
// whose flag is not kept).
std::optional<ViolationKind> ClassifyRead(const PageStamp& stamp,
                                          const StampIdentity& reader,
                                          uint32_t slots_read,
                                          StampIdentity* source = nullptr,
                                          bool* source_shared = nullptr);

// Records that `writer` wrote slots [first_slot, end_slot) of the page.
// `filled` grows only over contiguous writes. A new identity takes the stamp
// over only with a write starting at slot 0; a write further into a page
// last written by someone else leaves that someone's bytes before it, so the
// stamp keeps naming them (and a read is attributed to them). A takeover
// keeps the displaced writer as `prior` (see above) and clears the shared
// flag: the new writer's bytes are nobody's shared prefix until marked so
// (set_shared). Returns
// kLateWrite if the writer's generation is not the owner's (the page was
// reallocated since the writer reserved it); the write has landed either way,
// as it would have in memory.
std::optional<ViolationKind> StampWrite(PageStamp* stamp,
                                        const StampIdentity& writer,
                                        uint32_t first_slot, uint32_t end_slot);

// One violation, attributed: who read (reader) whose data (writer) where.
struct WatermarkViolation {
  ViolationKind kind = ViolationKind::kUnwrittenRead;
  uint32_t layer = 0;
  PageId page;
  uint32_t slots_read = 0;
  StampIdentity reader;
  StampIdentity writer;  // the stamp's writer at the time of the read
  StampIdentity owner;   // the stamp's owner at the time of the read
  uint32_t filled = 0;
  // The writer's bytes were marked as its tenant's shared prefix (the
  // writer is still the real request that computed them).
  bool writer_shared = false;

  std::string DebugString() const;
};

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_PAGE_STAMP_H_
