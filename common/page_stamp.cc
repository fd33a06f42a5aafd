#include "common/page_stamp.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/wire.h"

namespace kvcanary {

const char* WatermarkModeName(WatermarkMode mode) {
  switch (mode) {
    case WatermarkMode::kOff:
      return "off";
    case WatermarkMode::kDetect:
      return "detect";
    case WatermarkMode::kEnforce:
      return "enforce";
  }
  return "unknown";
}

absl::StatusOr<WatermarkMode> ParseWatermarkMode(absl::string_view name) {
  if (name == "off") return WatermarkMode::kOff;
  if (name == "detect") return WatermarkMode::kDetect;
  if (name == "enforce") return WatermarkMode::kEnforce;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown watermark mode '", name, "' (want off, detect or enforce)"));
}

const char* ViolationKindName(ViolationKind kind) {
  switch (kind) {
    case ViolationKind::kForeignTenantRead:
      return "foreign_tenant_read";
    case ViolationKind::kStaleRequestRead:
      return "stale_request_read";
    case ViolationKind::kUnwrittenRead:
      return "unwritten_read";
    case ViolationKind::kLateWrite:
      return "late_write";
  }
  return "unknown";
}

namespace {
void EncodeIdentity(const StampIdentity& id, std::string* out) {
  PutFixed32(out, id.tenant.value());
  PutFixed64(out, id.request.value());
  PutFixed32(out, id.generation.value());
}
StampIdentity DecodeIdentity(WireReader* r) {
  StampIdentity id;
  id.tenant = TenantId(r->Fixed32());
  id.request = RequestId(r->Fixed64());
  id.generation = PageGeneration(r->Fixed32());
  return id;
}
}  // namespace

void PageStamp::EncodeTo(std::string* out) const {
  PutFixed32(out, magic);
  PutFixed16(out, version);
  PutFixed16(out, layer);
  PutFixed32(out, page.value());
  EncodeIdentity(owner, out);
  EncodeIdentity(writer, out);
  PutFixed32(out, filled);
  PutFixed32(out, flags);
}

absl::StatusOr<PageStamp> PageStamp::Decode(absl::string_view in) {
  if (in.size() < kEncodedSizeBytes) {
    return absl::DataLossError(absl::StrCat("page stamp truncated: ", in.size(),
                                            " of ", kEncodedSizeBytes,
                                            " bytes"));
  }
  WireReader r(in);
  PageStamp s;
  s.magic = r.Fixed32();
  if (s.magic != kMagic) return absl::DataLossError("page stamp: bad magic");
  s.version = r.Fixed16();
  if (s.version != kVersion) {
    return absl::DataLossError(absl::StrCat("page stamp: unknown version ",
                                            s.version, ", want ", kVersion));
  }
  s.layer = r.Fixed16();
  s.page = PageId(r.Fixed32());
  s.owner = DecodeIdentity(&r);
  s.writer = DecodeIdentity(&r);
  s.filled = r.Fixed32();
  s.flags = r.Fixed32();
  if ((s.flags & ~kStampKnownFlags) != 0) {
    return absl::DataLossError(
        absl::StrCat("page stamp: unknown flags 0x",
                     absl::Hex(s.flags & ~kStampKnownFlags)));
  }
  return s;
}

std::optional<ViolationKind> ClassifyRead(const PageStamp& stamp,
                                          const StampIdentity& reader,
                                          uint32_t slots_read,
                                          StampIdentity* source,
                                          bool* source_shared) {
  const StampIdentity& w = stamp.writer;
  if (source != nullptr) *source = w;
  if (source_shared != nullptr) *source_shared = stamp.shared();
  if (w.tenant == kNoTenant) return ViolationKind::kUnwrittenRead;
  if (w.tenant != reader.tenant) return ViolationKind::kForeignTenantRead;
  if (w.request != reader.request && !SharedAt(stamp, reader.generation)) {
    return ViolationKind::kStaleRequestRead;
  }
  if (w.generation != reader.generation) return ViolationKind::kLateWrite;
  if (slots_read <= stamp.filled) return std::nullopt;
  // A read past what the writer filled: the slots there still hold the
  // prior writer's bytes, if it had filled them.
  const StampIdentity& p = stamp.prior;
  if (p.tenant != kNoTenant && stamp.prior_filled > stamp.filled) {
    if (source != nullptr) *source = p;
    if (source_shared != nullptr) *source_shared = false;
    if (p.tenant != reader.tenant) return ViolationKind::kForeignTenantRead;
    if (p.request != reader.request) return ViolationKind::kStaleRequestRead;
    if (source != nullptr) *source = w;
    if (source_shared != nullptr) *source_shared = stamp.shared();
  }
  return ViolationKind::kUnwrittenRead;
}

std::optional<ViolationKind> StampWrite(PageStamp* stamp,
                                        const StampIdentity& writer,
                                        uint32_t first_slot,
                                        uint32_t end_slot) {
  if (stamp->writer != writer) {
    // A new writer takes the stamp over only by writing from slot 0: then
    // [0, end_slot) is its own. A write further in leaves the previous
    // writer's bytes in [0, first_slot), so the stamp keeps naming that
    // writer and any read of the page is attributed to it.
    if (first_slot == 0) {
      if (stamp->writer.tenant != kNoTenant) {
        stamp->prior = stamp->writer;
        stamp->prior_filled = stamp->filled;
      }
      stamp->writer = writer;
      stamp->filled = end_slot;
      stamp->set_shared(false);
    }
  } else if (first_slot <= stamp->filled && end_slot > stamp->filled) {
    stamp->filled = end_slot;
  }
  if (writer.generation != stamp->owner.generation) {
    return ViolationKind::kLateWrite;
  }
  return std::nullopt;
}

std::string WatermarkViolation::DebugString() const {
  return absl::StrCat(
      ViolationKindName(kind), " layer=", layer, " page=", page.value(),
      " slots_read=", slots_read, " filled=", filled, " reader=(tenant ",
      reader.tenant.value(), ", request ", reader.request.value(), ", gen ",
      reader.generation.value(), ") writer=(tenant ", writer.tenant.value(),
      ", request ", writer.request.value(), ", gen ", writer.generation.value(),
      writer_shared ? ", shared" : "", ") owner=(tenant ", owner.tenant.value(),
      ", request ", owner.request.value(), ", gen ", owner.generation.value(),
      ")");
}

}  // namespace kvcanary
