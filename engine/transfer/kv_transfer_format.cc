#include "engine/transfer/kv_transfer_format.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/crc32c.h"
#include "common/wire.h"

namespace kvcanary::engine::kv {
namespace {

struct FrameHeader {
  FrameType type;
  uint32_t payload_size;
};

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

absl::string_view CappedMessage(const std::string& message) {
  return absl::string_view(message).substr(0, kMaxMessageSize);
}

// The payload size EncodeFrame will write for `frame`.
uint64_t PayloadSizeOf(const Frame& frame) {
  return std::visit(
      Overloaded{
          [](const Metadata&) -> uint64_t { return kMetadataPayloadSize; },
          [](const Page& p) -> uint64_t {
            return uint64_t{kPageFixedPayloadSize} + p.kv_bytes.size();
          },
          [](const Commit&) -> uint64_t { return kCommitPayloadSize; },
          [](const Abort& a) -> uint64_t {
            return kMessageFixedPayloadSize + CappedMessage(a.message).size();
          },
          [](const Ack& a) -> uint64_t {
            return kMessageFixedPayloadSize + CappedMessage(a.message).size();
          },
          [](const Hello&) -> uint64_t { return kHelloPayloadSize; },
          [](const Auth&) -> uint64_t { return kAuthPayloadSize; },
      },
      frame);
}

void EncodeMessage(RequestId request, uint32_t code, const std::string& message,
                   std::string* out) {
  const absl::string_view m = CappedMessage(message);
  PutFixed64(out, request.value());
  PutFixed32(out, code);
  PutFixed32(out, static_cast<uint32_t>(m.size()));
  out->append(m.data(), m.size());
}

void EncodeHeader(FrameType type, uint32_t payload_size, std::string* out) {
  const size_t start = out->size();
  PutFixed32(out, kFrameMagic);
  PutFixed16(out, kProtocolVersion);
  out->push_back(static_cast<char>(type));
  out->push_back(0);  // flags
  PutFixed32(out, payload_size);
  PutFixed32(out, Crc32c(out->data() + start, 12));
}

// Every payload but a Page's (EncodePageHead).
void EncodePayload(const Frame& frame, std::string* out) {
  std::visit(
      Overloaded{
          [out](const Metadata& m) {
            PutFixed64(out, m.request.value());
            PutFixed32(out, m.tenant.value());
            PutFixed32(out, m.prompt_tokens);
            PutFixed32(out, m.reserved_pages);
            PutFixed32(out, m.page_tokens);
            PutFixed32(out, m.n_layers);
            PutFixed32(out, m.kv_heads);
            PutFixed32(out, m.head_dim);
            out->append(reinterpret_cast<const char*>(m.transfer_token.data()),
                        m.transfer_token.size());
          },
          [](const Page&) {},  // EncodeFrame writes it with EncodePageHead
          [out](const Commit& c) {
            PutFixed64(out, c.request.value());
            PutFixed32(out, c.pages_sent);
            PutFixed32(out, c.tokens_sent);
            PutFixed32(out, static_cast<uint32_t>(c.first_token));
          },
          [out](const Abort& a) {
            EncodeMessage(a.request, a.code, a.message, out);
          },
          [out](const Ack& a) {
            EncodeMessage(a.request, a.code, a.message, out);
          },
          [out](const Hello& h) {
            out->append(reinterpret_cast<const char*>(h.nonce.data()),
                        h.nonce.size());
          },
          [out](const Auth& a) {
            out->append(reinterpret_cast<const char*>(a.proof.data()),
                        a.proof.size());
          },
      },
      frame);
}

// Checks a payload size against its type's layout, so that a stream
// decoder refuses a bad header before waiting for its payload.
absl::Status CheckPayloadSize(FrameType type, uint32_t size) {
  auto exact = [&](uint32_t want) -> absl::Status {
    if (size == want) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat("kv ", FrameTypeName(type),
                                            " frame: payload_size ", size,
                                            ", want ", want));
  };
  auto range = [&](uint32_t min, uint32_t max) -> absl::Status {
    if (size >= min && size <= max) return absl::OkStatus();
    return absl::DataLossError(absl::StrCat("kv ", FrameTypeName(type),
                                            " frame: payload_size ", size,
                                            " outside [", min, ", ", max, "]"));
  };
  switch (type) {
    case FrameType::kMetadata:
      return exact(kMetadataPayloadSize);
    case FrameType::kPage:
      return range(kPageFixedPayloadSize, kMaxPayloadSize);
    case FrameType::kCommit:
      return exact(kCommitPayloadSize);
    case FrameType::kAbort:
    case FrameType::kAck:
      return range(kMessageFixedPayloadSize,
                   kMessageFixedPayloadSize + kMaxMessageSize);
    case FrameType::kHello:
      return exact(kHelloPayloadSize);
    case FrameType::kAuth:
      return exact(kAuthPayloadSize);
  }
  return absl::DataLossError("kv frame: unknown type");  // not reached
}

// REQUIRES: in.size() >= kFrameHeaderSize.
absl::StatusOr<FrameHeader> DecodeHeader(absl::string_view in) {
  WireReader r(in.substr(0, kFrameHeaderSize));
  const uint32_t magic = r.Fixed32();
  const uint16_t version = r.Fixed16();
  const uint8_t type = static_cast<uint8_t>(r.Bytes(1)[0]);
  const uint8_t flags = static_cast<uint8_t>(r.Bytes(1)[0]);
  const uint32_t payload_size = r.Fixed32();
  const uint32_t stored_crc = r.Fixed32();
  if (magic != kFrameMagic) {
    return absl::DataLossError(absl::StrFormat(
        "kv frame header: bad magic 0x%08x, want 0x%08x", magic, kFrameMagic));
  }
  const uint32_t crc = Crc32c(in.data(), 12);
  if (crc != stored_crc) {
    return absl::DataLossError(absl::StrFormat(
        "kv frame header: CRC mismatch, stored 0x%08x, computed 0x%08x",
        stored_crc, crc));
  }
  if (version != kProtocolVersion) {
    return absl::DataLossError(absl::StrCat("kv frame header: unknown version ",
                                            version, ", this node speaks ",
                                            kProtocolVersion));
  }
  if (type < static_cast<uint8_t>(FrameType::kMetadata) ||
      type > static_cast<uint8_t>(FrameType::kAuth)) {
    return absl::DataLossError(
        absl::StrCat("kv frame header: unknown frame type ", int{type}));
  }
  if (flags != 0) {
    return absl::DataLossError(
        absl::StrFormat("kv frame header: flags 0x%02x, want 0", int{flags}));
  }
  if (payload_size > kMaxPayloadSize) {
    return absl::DataLossError(
        absl::StrCat("kv frame header: payload_size ", payload_size,
                     " exceeds the maximum ", kMaxPayloadSize));
  }
  const FrameHeader header{static_cast<FrameType>(type), payload_size};
  if (absl::Status s = CheckPayloadSize(header.type, payload_size); !s.ok()) {
    return s;
  }
  return header;
}

// The payload decoders below run after CheckPayloadSize, but re-check
// every size they rely on before reading.

absl::StatusOr<Frame> DecodeMetadata(absl::string_view in) {
  if (in.size() != kMetadataPayloadSize) {
    return absl::DataLossError("kv metadata frame: bad payload size");
  }
  WireReader r(in);
  Metadata m;
  m.request = RequestId(r.Fixed64());
  // No request has that id: a frame naming it is corrupt or forged, and a
  // stamp once used it to mean "shared prefix".
  if (m.request == kReservedRequestId) {
    return absl::DataLossError(
        "kv metadata frame: request id 18446744073709551615 (2^64 - 1) is "
        "reserved");
  }
  m.tenant = TenantId(r.Fixed32());
  m.prompt_tokens = r.Fixed32();
  m.reserved_pages = r.Fixed32();
  m.page_tokens = r.Fixed32();
  m.n_layers = r.Fixed32();
  m.kv_heads = r.Fixed32();
  m.head_dim = r.Fixed32();
  const absl::string_view token = r.Bytes(m.transfer_token.size());
  std::copy(token.begin(), token.end(), m.transfer_token.begin());
  return Frame(std::move(m));
}

// Hello and Auth: a fixed-size byte string.
template <typename T, size_t N>
absl::StatusOr<Frame> DecodeBytes(absl::string_view in,
                                  std::array<uint8_t, N> T::*field) {
  if (in.size() != N) {
    return absl::DataLossError("kv handshake frame: bad payload size");
  }
  T t;
  std::copy(in.begin(), in.end(), (t.*field).begin());
  return Frame(std::move(t));
}

absl::StatusOr<Frame> DecodePage(absl::string_view in) {
  if (in.size() < kPageFixedPayloadSize) {
    return absl::DataLossError(
        absl::StrCat("kv page frame: payload of ", in.size(),
                     " bytes is shorter than ", kPageFixedPayloadSize));
  }
  WireReader r(in);
  Page p;
  p.index = r.Fixed32();
  p.layer = r.Fixed32();
  const absl::string_view stamp_bytes = r.Bytes(PageStamp::kEncodedSizeBytes);
  p.slots = r.Fixed32();
  const uint32_t kv_size = r.Fixed32();
  // The CRC sits in the last 4 bytes whatever kv_size says, so it is checked
  // first: any corruption of the payload reads as a CRC mismatch.
  const uint32_t stored_crc = WireReader(in.substr(in.size() - 4)).Fixed32();
  const uint32_t crc = Crc32c(in.data(), in.size() - 4);
  if (crc != stored_crc) {
    return absl::DataLossError(absl::StrFormat(
        "kv page frame (index %u, layer %u): CRC mismatch, stored 0x%08x, "
        "computed 0x%08x",
        p.index, p.layer, stored_crc, crc));
  }
  if (uint64_t{kv_size} + kPageFixedPayloadSize != in.size()) {
    return absl::DataLossError(absl::StrCat(
        "kv page frame (index ", p.index, ", layer ", p.layer, "): kv_size ",
        kv_size, " disagrees with payload_size ", in.size(), " (want ",
        in.size() - kPageFixedPayloadSize, ")"));
  }
  const absl::string_view kv = r.Bytes(kv_size);
  const uint64_t per_slot = 8 * uint64_t{p.slots};  // K and V, 4-byte floats
  if ((p.slots == 0) ? kv_size != 0 : kv_size % per_slot != 0) {
    return absl::DataLossError(absl::StrCat(
        "kv page frame (index ", p.index, ", layer ", p.layer, "): kv_size ",
        kv_size, " is not 2 * ", p.slots, " slots * 4 bytes * a whole number"));
  }
  absl::StatusOr<PageStamp> stamp = PageStamp::Decode(stamp_bytes);
  if (!stamp.ok()) {
    return absl::DataLossError(absl::StrCat("kv page frame (index ", p.index,
                                            ", layer ", p.layer,
                                            "): ", stamp.status().message()));
  }
  p.stamp = *stamp;
  p.kv_bytes.assign(kv.data(), kv.size());
  return Frame(std::move(p));
}

absl::StatusOr<Frame> DecodeCommit(absl::string_view in) {
  if (in.size() != kCommitPayloadSize) {
    return absl::DataLossError("kv commit frame: bad payload size");
  }
  WireReader r(in);
  Commit c;
  c.request = RequestId(r.Fixed64());
  c.pages_sent = r.Fixed32();
  c.tokens_sent = r.Fixed32();
  c.first_token = static_cast<int32_t>(r.Fixed32());
  return Frame(c);
}

// Abort and Ack share a layout: request, code, then a sized message.
template <typename T>
absl::StatusOr<Frame> DecodeMessage(FrameType type, absl::string_view in) {
  if (in.size() < kMessageFixedPayloadSize) {
    return absl::DataLossError(absl::StrCat("kv ", FrameTypeName(type),
                                            " frame: payload of ", in.size(),
                                            " bytes is too short"));
  }
  WireReader r(in);
  T t;
  t.request = RequestId(r.Fixed64());
  t.code = r.Fixed32();
  // A status code from the wire must be one absl knows, and an Abort must
  // not say OK: a receiver may turn it straight into an absl::Status.
  constexpr uint32_t kMaxCode =
      static_cast<uint32_t>(absl::StatusCode::kUnauthenticated);
  const uint32_t min_code = type == FrameType::kAbort ? 1 : 0;
  if (t.code < min_code || t.code > kMaxCode) {
    return absl::DataLossError(
        absl::StrCat("kv ", FrameTypeName(type), " frame: status code ", t.code,
                     " outside [", min_code, ", ", kMaxCode, "]"));
  }
  const uint32_t size = r.Fixed32();
  if (size > kMaxMessageSize) {
    return absl::DataLossError(absl::StrCat("kv ", FrameTypeName(type),
                                            " frame: message_size ", size,
                                            " exceeds ", kMaxMessageSize));
  }
  if (size != r.remaining()) {
    return absl::DataLossError(absl::StrCat(
        "kv ", FrameTypeName(type), " frame: message_size ", size,
        " disagrees with the ", r.remaining(), " payload bytes after it"));
  }
  const absl::string_view message = r.Bytes(size);
  t.message.assign(message.data(), message.size());
  return Frame(std::move(t));
}

// REQUIRES: payload.size() == header.payload_size.
absl::StatusOr<Frame> DecodePayload(FrameType type, absl::string_view payload) {
  switch (type) {
    case FrameType::kMetadata:
      return DecodeMetadata(payload);
    case FrameType::kPage:
      return DecodePage(payload);
    case FrameType::kCommit:
      return DecodeCommit(payload);
    case FrameType::kAbort:
      return DecodeMessage<Abort>(type, payload);
    case FrameType::kAck:
      return DecodeMessage<Ack>(type, payload);
    case FrameType::kHello:
      return DecodeBytes(payload, &Hello::nonce);
    case FrameType::kAuth:
      return DecodeBytes(payload, &Auth::proof);
  }
  return absl::DataLossError("kv frame: unknown type");  // not reached
}

}  // namespace

FrameType TypeOf(const Frame& frame) {
  return std::visit(Overloaded{
                        [](const Metadata&) { return FrameType::kMetadata; },
                        [](const Page&) { return FrameType::kPage; },
                        [](const Commit&) { return FrameType::kCommit; },
                        [](const Abort&) { return FrameType::kAbort; },
                        [](const Ack&) { return FrameType::kAck; },
                        [](const Hello&) { return FrameType::kHello; },
                        [](const Auth&) { return FrameType::kAuth; },
                    },
                    frame);
}

const char* FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kMetadata:
      return "metadata";
    case FrameType::kPage:
      return "page";
    case FrameType::kCommit:
      return "commit";
    case FrameType::kAbort:
      return "abort";
    case FrameType::kAck:
      return "ack";
    case FrameType::kHello:
      return "hello";
    case FrameType::kAuth:
      return "auth";
  }
  return "unknown";
}

void EncodeFrame(const Frame& frame, std::string* out) {
  const uint64_t payload_size = PayloadSizeOf(frame);
  CHECK_LE(payload_size, kMaxPayloadSize) << FrameTypeName(TypeOf(frame));
  out->reserve(out->size() + kFrameHeaderSize + payload_size);
  const size_t start = out->size();
  if (const auto* page = std::get_if<Page>(&frame)) {
    const uint32_t crc = EncodePageHead(*page, out);
    out->append(page->kv_bytes);
    PutFixed32(out, crc);
  } else {
    EncodeHeader(TypeOf(frame), static_cast<uint32_t>(payload_size), out);
    EncodePayload(frame, out);
  }
  CHECK_EQ(out->size() - start, kFrameHeaderSize + payload_size);
}

uint32_t EncodePageHead(const Page& page, std::string* out) {
  const uint64_t payload_size =
      uint64_t{kPageFixedPayloadSize} + page.kv_bytes.size();
  CHECK_LE(payload_size, kMaxPayloadSize) << "page";
  EncodeHeader(FrameType::kPage, static_cast<uint32_t>(payload_size), out);
  const size_t start = out->size();
  PutFixed32(out, page.index);
  PutFixed32(out, page.layer);
  page.stamp.EncodeTo(out);
  PutFixed32(out, page.slots);
  PutFixed32(out, static_cast<uint32_t>(page.kv_bytes.size()));
  const uint32_t head_crc = Crc32c(out->data() + start, out->size() - start);
  return Crc32cExtend(head_crc, page.kv_bytes.data(), page.kv_bytes.size());
}

void FrameDecoder::Feed(absl::string_view bytes) {
  if (bytes.empty()) return;
  std::memcpy(PrepareFeed(bytes.size()), bytes.data(), bytes.size());
  CommitFeed(bytes.size());
}

char* FrameDecoder::PrepareFeed(size_t size) {
  const size_t live = end_ - begin_;
  if (capacity_ - end_ >= size) return buffer_.get() + end_;
  if (live + size <= capacity_ && live <= capacity_ / 2) {
    // Moving the live bytes down frees at least half the buffer: amortised
    // linear.
    std::memmove(buffer_.get(), buffer_.get() + begin_, live);
  } else {
    // Enough for what is asked, and at least double the live bytes (so a
    // frame fed a byte at a time costs linear time).
    const size_t capacity = std::max(live + size, 2 * live);
    // Not value-initialised: a read fills it.
    std::unique_ptr<char[]> bigger(new char[capacity]);
    std::memcpy(bigger.get(), buffer_.get() + begin_, live);
    buffer_ = std::move(bigger);
    capacity_ = capacity;
  }
  begin_ = 0;
  end_ = live;
  return buffer_.get() + end_;
}

void FrameDecoder::CommitFeed(size_t n) {
  CHECK_LE(n, capacity_ - end_);
  end_ += n;
}

absl::StatusOr<std::optional<Frame>> FrameDecoder::Next() {
  if (!failed_.ok()) return failed_;
  const absl::string_view avail(buffer_.get() + begin_, end_ - begin_);
  if (avail.size() < kFrameHeaderSize) return std::nullopt;
  absl::StatusOr<FrameHeader> header = DecodeHeader(avail);
  if (header.ok() && header->type == FrameType::kPage &&
      header->payload_size > max_page_payload_) {
    header = absl::DataLossError(absl::StrCat(
        "kv page frame: payload_size ", header->payload_size,
        " exceeds this receiver's page limit ", max_page_payload_));
  }
  if (!header.ok()) {
    failed_ = header.status();
    return failed_;
  }
  const size_t frame_size = kFrameHeaderSize + header->payload_size;
  if (avail.size() < frame_size) return std::nullopt;
  absl::StatusOr<Frame> frame = DecodePayload(
      header->type, avail.substr(kFrameHeaderSize, header->payload_size));
  if (!frame.ok()) {
    failed_ = frame.status();
    return failed_;
  }
  begin_ += frame_size;
  if (begin_ == end_) begin_ = end_ = 0;
  return std::optional<Frame>(std::move(*frame));
}

absl::StatusOr<Frame> DecodeOneFrame(absl::string_view in) {
  if (in.size() < kFrameHeaderSize) {
    return absl::DataLossError(absl::StrCat("kv frame truncated: ", in.size(),
                                            " of ", kFrameHeaderSize,
                                            " header bytes"));
  }
  absl::StatusOr<FrameHeader> header = DecodeHeader(in);
  if (!header.ok()) return header.status();
  const size_t frame_size = kFrameHeaderSize + header->payload_size;
  if (in.size() < frame_size) {
    return absl::DataLossError(absl::StrCat("kv ", FrameTypeName(header->type),
                                            " frame truncated: ", in.size(),
                                            " of ", frame_size, " bytes"));
  }
  if (in.size() > frame_size) {
    return absl::DataLossError(absl::StrCat("kv ", FrameTypeName(header->type),
                                            " frame: ", in.size() - frame_size,
                                            " trailing bytes after the frame"));
  }
  return DecodePayload(header->type,
                       in.substr(kFrameHeaderSize, header->payload_size));
}

}  // namespace kvcanary::engine::kv
