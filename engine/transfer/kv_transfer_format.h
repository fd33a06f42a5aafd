// The KV transfer protocol, prefill -> decode over TCP: frames and their
// encoding. Written down in docs/kv-transfer.md; this header is the contract.
//
// One TCP connection carries one request's transfer:
//   decode -> prefill: Hello (a fresh nonce) as soon as it accepts
//   prefill -> decode: Auth (HMAC of the nonce under the deployment secret),
//                      Metadata (with the reservation's transfer token),
//                      Page x N, Commit                (or Abort at any point)
//   decode -> prefill: Ack after verifying the commit  (or Abort at any point)
//
// Every frame: a 16-byte header, then `payload_size` bytes of payload.
//   header: magic u32 "KVTF" (0x4654564B), version u16 (3), type u8,
//           flags u8 (0), payload_size u32, header_crc u32 (CRC32C of the
//           first 12 header bytes)
// All integers little-endian. The payload of each type is below; a Page
// payload ends with the CRC32C of everything before it in that payload.
#ifndef KVCANARY_ENGINE_TRANSFER_KV_TRANSFER_FORMAT_H_
#define KVCANARY_ENGINE_TRANSFER_KV_TRANSFER_FORMAT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/ids.h"
#include "common/page_stamp.h"

namespace kvcanary::engine::kv {

inline constexpr uint32_t kFrameMagic = 0x4654564B;  // "KVTF"
// 2: Page frames carry the version-2 page stamp (52 bytes, with flags), and
// a Metadata frame naming kReservedRequestId is refused.
// 3: the Hello/Auth handshake, and Metadata carries the transfer token.
// 4: a connection (a session) carries transfers one after another: after
// an Ack the next Metadata may follow on the same connection.
inline constexpr uint16_t kProtocolVersion = 4;
inline constexpr size_t kFrameHeaderSize = 16;
// Upper bound on one payload; a header claiming more is corrupt.
inline constexpr uint32_t kMaxPayloadSize = 64u << 20;
// Longest Abort/Ack message; EncodeFrame truncates a longer one.
inline constexpr uint32_t kMaxMessageSize = 4096;
// Payload sizes by type (field offsets: docs/kv-transfer.md).
inline constexpr uint32_t kMetadataPayloadSize = 52;
inline constexpr uint32_t kHelloPayloadSize = 16;
inline constexpr uint32_t kAuthPayloadSize = 32;
inline constexpr uint32_t kCommitPayloadSize = 20;
inline constexpr uint32_t kPageFixedPayloadSize = 72;     // + kv bytes
inline constexpr uint32_t kMessageFixedPayloadSize = 16;  // + message bytes
// index, layer, stamp, slots, kv_size, ..., page_crc.
static_assert(kPageFixedPayloadSize ==
              4 + 4 + PageStamp::kEncodedSizeBytes + 4 + 4 + 4);

enum class FrameType : uint8_t {
  kMetadata = 1,
  kPage = 2,
  kCommit = 3,
  kAbort = 4,
  kAck = 5,
  kHello = 6,
  kAuth = 7,
};

// What the prefill node is about to send, and what it believes decode
// reserved. Decode checks every field against its own reservation.
struct Metadata {
  RequestId request;  // never kReservedRequestId (the decoder refuses it)
  TenantId tenant;
  uint32_t prompt_tokens = 0;  // tokens whose K/V will be sent
  // Pages the decode node reserved (from the request).
  uint32_t reserved_pages = 0;
  uint32_t page_tokens = 0;  // KV geometry; must equal the decode node's
  uint32_t n_layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  // The reservation's transfer token, as the decode node gave it with the
  // request (engine/internal_auth.h).
  std::array<uint8_t, 16> transfer_token{};
};

// One page of one layer: its stamp as the prefill node wrote it, and the K/V
// of its first `slots` token slots.
struct Page {
  uint32_t index = 0;  // position in the request's block table
  uint32_t layer = 0;
  PageStamp stamp;     // encoded with PageStamp::EncodeTo
  uint32_t slots = 0;  // token slots carried (<= page_tokens)
  // K then V: (slots, kv_heads, head_dim) each, f32. Its size must be
  // 2 * slots * kv_heads * head_dim * 4 bytes; the decoder cannot check the
  // geometry (it does not know kv_heads/head_dim), the receiver does.
  // The decoder refuses a size that no geometry can give: nonzero with 0
  // slots, or not a multiple of 8 * slots.
  std::string kv_bytes;
  // The payload CRC32C: computed on encode; checked on decode (kDataLoss on
  // mismatch).
};

// The prefill node's statement of what it sent, and the first generated
// token (sampled by the prefill node from the prompt's last logits).
struct Commit {
  RequestId request;
  uint32_t pages_sent = 0;   // Page frames, summed over layers
  uint32_t tokens_sent = 0;  // tokens whose K/V the pages hold
  int32_t first_token = -1;
};

// Either side gives up; `code` is an absl::StatusCode value, never OK: the
// decoder refuses 0 (so set it) and codes absl does not define.
struct Abort {
  RequestId request;
  uint32_t code = 0;
  std::string message;  // ids and counts only, never prompt text
};

// Decode's verdict after verifying the commit: OK, or why not.
struct Ack {
  RequestId request;
  uint32_t code = 0;  // absl::StatusCode; 0 = OK (the decoder refuses > 16)
  std::string message;
};

// The receiver's challenge, sent as soon as it accepts a connection.
struct Hello {
  std::array<uint8_t, 16> nonce{};
};

// The sender's answer: HMAC-SHA256 of the nonce under the deployment secret
// (SharedSecret::KvProof). The receiver reads nothing else before it.
struct Auth {
  std::array<uint8_t, 32> proof{};
};

using Frame = std::variant<Metadata, Page, Commit, Abort, Ack, Hello, Auth>;

FrameType TypeOf(const Frame& frame);
// "metadata", "page", "commit", "abort", "ack", "hello", "auth"; "unknown"
// otherwise.
const char* FrameTypeName(FrameType type);

// Appends the frame (header + payload) to *out. An Abort/Ack message longer
// than kMaxMessageSize is truncated to it. REQUIRES: a Page's kv_bytes fit
// in kMaxPayloadSize (CHECKed: senders size pages from the geometry).
void EncodeFrame(const Frame& frame, std::string* out);

// A Page frame is its head (the frame header and the payload up to
// kv_size), the page's kv_bytes, and the page CRC.
inline constexpr size_t kPageHeadSize =
    kFrameHeaderSize + kPageFixedPayloadSize - 4;
// For gather writes, which send kv_bytes from where they lie: appends the
// head of `page`'s frame to *out and returns the page CRC, computed over
// the payload's head and kv_bytes. Head, kv_bytes, then the CRC
// (PutFixed32) are byte for byte what EncodeFrame writes. REQUIRES: as
// EncodeFrame.
uint32_t EncodePageHead(const Page& page, std::string* out);

// Incremental decoder over a byte stream, which it buffers until whole
// frames are in: at most one incomplete frame and what was fed after it.
// Not thread-safe.
class FrameDecoder {
 public:
  // A Page frame whose payload exceeds `max` is refused from its header,
  // before its payload is buffered (receivers set it from the KV geometry).
  // REQUIRES: max <= kMaxPayloadSize.
  void set_max_page_payload(uint32_t max) { max_page_payload_ = max; }
  void Feed(absl::string_view bytes);
  // For reads straight into the decoder, with no copy: room for `size`
  // bytes after those buffered, valid until the next call on the decoder;
  // CommitFeed(n) then feeds the first n of them (n <= size).
  char* PrepareFeed(size_t size);
  void CommitFeed(size_t n);
  // The next complete frame; nullopt if more bytes are needed. kDataLoss for
  // anything corrupt (bad magic, header CRC, page CRC, unknown version or
  // type, oversized or inconsistent payload, trailing bytes inside a
  // payload, a bad page stamp) and for a Metadata frame naming the reserved
  // request id; after an error the decoder stays failed.
  absl::StatusOr<std::optional<Frame>> Next();
  size_t buffered_bytes() const { return end_ - begin_; }

 private:
  // Bytes [begin_, end_) of buffer_ (capacity_ bytes) are fed and not yet
  // decoded.
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
  uint32_t max_page_payload_ = kMaxPayloadSize;
  absl::Status failed_;
};

// Decodes exactly one whole frame from `in` (tests, fuzzing): kDataLoss for
// corruption, truncation or trailing bytes.
absl::StatusOr<Frame> DecodeOneFrame(absl::string_view in);

}  // namespace kvcanary::engine::kv

#endif  // KVCANARY_ENGINE_TRANSFER_KV_TRANSFER_FORMAT_H_
