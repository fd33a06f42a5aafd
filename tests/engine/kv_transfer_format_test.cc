#include "engine/transfer/kv_transfer_format.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/wire.h"
#include "gtest/gtest.h"

namespace kvcanary::engine::kv {
namespace {

PageStamp TestStamp() {
  PageStamp s;
  s.layer = 1;
  s.page = PageId(7);
  s.owner = StampIdentity{RequestId(42), TenantId(3), PageGeneration(9)};
  s.writer = s.owner;
  s.filled = 16;
  return s;
}

Metadata TestMetadata() {
  Metadata m;
  m.request = RequestId(0x0123456789abcdefULL);
  m.tenant = TenantId(3);
  m.prompt_tokens = 37;
  m.reserved_pages = 6;
  m.page_tokens = 16;
  m.n_layers = 2;
  m.kv_heads = 4;
  m.head_dim = 8;
  return m;
}

// A page of 16 slots, 4 kv heads, head_dim 8: 2*16*4*8*4 = 4096 bytes.
Page TestPage(uint32_t slots = 16) {
  Page p;
  p.index = 2;
  p.layer = 1;
  p.stamp = TestStamp();
  p.slots = slots;
  p.kv_bytes.resize(size_t{2} * slots * 4 * 8 * 4);
  for (size_t i = 0; i < p.kv_bytes.size(); ++i) {
    p.kv_bytes[i] = static_cast<char>(i * 31 + 7);
  }
  return p;
}

std::string Encode(const Frame& f) {
  std::string out;
  EncodeFrame(f, &out);
  return out;
}

std::string StampBytes(const PageStamp& s) {
  std::string out;
  s.EncodeTo(&out);
  return out;
}

// A frame with a correct header CRC around any payload, so that payload
// checks are reached.
std::string RawFrame(uint8_t type, const std::string& payload,
                     uint16_t version = kProtocolVersion, uint8_t flags = 0,
                     std::optional<uint32_t> payload_size = std::nullopt) {
  std::string out;
  PutFixed32(&out, kFrameMagic);
  PutFixed16(&out, version);
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  PutFixed32(&out, payload_size.value_or(payload.size()));
  PutFixed32(&out, Crc32c(out.data(), 12));
  return out + payload;
}

// A Page payload from parts, with a correct page CRC.
std::string PagePayload(const std::string& stamp, uint32_t slots,
                        uint32_t kv_size, const std::string& kv) {
  std::string p;
  PutFixed32(&p, 2);
  PutFixed32(&p, 1);
  p += stamp;
  PutFixed32(&p, slots);
  PutFixed32(&p, kv_size);
  p += kv;
  PutFixed32(&p, Crc32c(p));
  return p;
}

template <typename T>
T DecodeAs(const std::string& bytes) {
  absl::StatusOr<Frame> f = DecodeOneFrame(bytes);
  EXPECT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f.ok() && std::holds_alternative<T>(*f));
  return f.ok() ? std::get<T>(*f) : T{};
}

void ExpectDataLoss(const std::string& bytes, absl::string_view why) {
  absl::StatusOr<Frame> f = DecodeOneFrame(bytes);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << f.status();
  EXPECT_NE(f.status().message().find(why), absl::string_view::npos)
      << f.status();
  FrameDecoder d;
  d.Feed(bytes);
  absl::StatusOr<std::optional<Frame>> next = d.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss);
}

TEST(KvTransferFormatTest, HeaderHasTheDocumentedLayout) {
  const std::string bytes = Encode(Commit{RequestId(5), 1, 2, 3});
  ASSERT_EQ(bytes.size(), kFrameHeaderSize + kCommitPayloadSize);
  EXPECT_EQ(bytes.substr(0, 4), "KVTF");
  WireReader r(bytes);
  EXPECT_EQ(r.Fixed32(), kFrameMagic);
  EXPECT_EQ(r.Fixed16(), 4u);  // version
  EXPECT_EQ(r.Bytes(1)[0], static_cast<char>(FrameType::kCommit));
  EXPECT_EQ(r.Bytes(1)[0], 0);  // flags
  EXPECT_EQ(r.Fixed32(), kCommitPayloadSize);
  EXPECT_EQ(r.Fixed32(), Crc32c(bytes.data(), 12));
  EXPECT_EQ(r.Fixed64(), 5u);  // payload starts with the request id
}

TEST(KvTransferFormatTest, MetadataRoundTrips) {
  const Metadata m = TestMetadata();
  const std::string bytes = Encode(m);
  EXPECT_EQ(bytes.size(), kFrameHeaderSize + kMetadataPayloadSize);
  const Metadata got = DecodeAs<Metadata>(bytes);
  EXPECT_EQ(got.request, m.request);
  EXPECT_EQ(got.tenant, m.tenant);
  EXPECT_EQ(got.prompt_tokens, m.prompt_tokens);
  EXPECT_EQ(got.reserved_pages, m.reserved_pages);
  EXPECT_EQ(got.page_tokens, m.page_tokens);
  EXPECT_EQ(got.n_layers, m.n_layers);
  EXPECT_EQ(got.kv_heads, m.kv_heads);
  EXPECT_EQ(got.head_dim, m.head_dim);
  EXPECT_EQ(TypeOf(Frame(m)), FrameType::kMetadata);
}

TEST(KvTransferFormatTest, MetadataCarriesTheTransferTokenAfterTheGeometry) {
  Metadata m = TestMetadata();
  for (size_t i = 0; i < m.transfer_token.size(); ++i) {
    m.transfer_token[i] = static_cast<uint8_t>(0xA0 + i);
  }
  const std::string bytes = Encode(m);
  ASSERT_EQ(kMetadataPayloadSize, 52u);
  EXPECT_EQ(
      bytes.substr(kFrameHeaderSize + 36, 16),
      std::string(reinterpret_cast<const char*>(m.transfer_token.data()), 16));
  EXPECT_EQ(DecodeAs<Metadata>(bytes).transfer_token, m.transfer_token);
}

TEST(KvTransferFormatTest, HelloAndAuthRoundTripWithTheirExactSizes) {
  Hello h;
  h.nonce[0] = 7;
  h.nonce[15] = 9;
  const std::string hello = Encode(h);
  EXPECT_EQ(hello.size(), kFrameHeaderSize + kHelloPayloadSize);
  EXPECT_EQ(DecodeAs<Hello>(hello).nonce, h.nonce);
  Auth a;
  a.proof[31] = 0xFF;
  const std::string auth = Encode(a);
  EXPECT_EQ(auth.size(), kFrameHeaderSize + kAuthPayloadSize);
  EXPECT_EQ(DecodeAs<Auth>(auth).proof, a.proof);
  ExpectDataLoss(
      RawFrame(static_cast<uint8_t>(FrameType::kAuth), std::string(31, 'x')),
      "payload_size");
}

TEST(KvTransferFormatTest, PageOverTheReceiversLimitIsRefusedFromItsHeader) {
  const std::string bytes = Encode(TestPage());
  FrameDecoder d;
  d.set_max_page_payload(kPageFixedPayloadSize + 64);
  d.Feed(absl::string_view(bytes).substr(0, kFrameHeaderSize));
  absl::StatusOr<std::optional<Frame>> next = d.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(next.status().message().find("page limit"), absl::string_view::npos)
      << next.status();
  FrameDecoder roomy;
  roomy.set_max_page_payload(static_cast<uint32_t>(bytes.size()));
  roomy.Feed(bytes);
  next = roomy.Next();
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE(next->has_value());
}

TEST(KvTransferFormatTest, RealSizedPageRoundTrips) {
  const Page p = TestPage();
  ASSERT_EQ(p.kv_bytes.size(), 2u * 16 * 4 * 8 * 4);
  const std::string bytes = Encode(p);
  EXPECT_EQ(bytes.size(),
            kFrameHeaderSize + kPageFixedPayloadSize + p.kv_bytes.size());
  const Page got = DecodeAs<Page>(bytes);
  EXPECT_EQ(got.index, p.index);
  EXPECT_EQ(got.layer, p.layer);
  EXPECT_EQ(got.slots, p.slots);
  EXPECT_EQ(got.kv_bytes, p.kv_bytes);
  EXPECT_EQ(StampBytes(got.stamp), StampBytes(p.stamp));
  EXPECT_EQ(Encode(got), bytes);
}

TEST(KvTransferFormatTest, PageWithZeroSlotsRoundTrips) {
  const Page p = TestPage(/*slots=*/0);
  EXPECT_TRUE(p.kv_bytes.empty());
  const std::string bytes = Encode(p);
  EXPECT_EQ(bytes.size(), kFrameHeaderSize + kPageFixedPayloadSize);
  const Page got = DecodeAs<Page>(bytes);
  EXPECT_EQ(got.slots, 0u);
  EXPECT_TRUE(got.kv_bytes.empty());
  EXPECT_EQ(StampBytes(got.stamp), StampBytes(p.stamp));
}

TEST(KvTransferFormatTest, CommitRoundTripsIncludingNegativeFirstToken) {
  for (int32_t first_token : {0, 31999, -1}) {
    const Commit c{RequestId(77), 12, 37, first_token};
    const Commit got = DecodeAs<Commit>(Encode(c));
    EXPECT_EQ(got.request, c.request);
    EXPECT_EQ(got.pages_sent, 12u);
    EXPECT_EQ(got.tokens_sent, 37u);
    EXPECT_EQ(got.first_token, first_token);
  }
}

TEST(KvTransferFormatTest, AbortAndAckRoundTrip) {
  const Abort a{RequestId(9), static_cast<uint32_t>(absl::StatusCode::kAborted),
                "prefill: prompt of 9000 tokens exceeds 4096"};
  const Abort got_abort = DecodeAs<Abort>(Encode(a));
  EXPECT_EQ(got_abort.request, a.request);
  EXPECT_EQ(got_abort.code, a.code);
  EXPECT_EQ(got_abort.message, a.message);

  const Ack ok{RequestId(9), 0, ""};
  const Ack got_ok = DecodeAs<Ack>(Encode(ok));
  EXPECT_EQ(got_ok.request, ok.request);
  EXPECT_EQ(got_ok.code, 0u);
  EXPECT_EQ(got_ok.message, "");

  const Ack bad{RequestId(9), 15, "pages received 1 != reserved 6"};
  EXPECT_EQ(DecodeAs<Ack>(Encode(bad)).message, bad.message);
  EXPECT_EQ(TypeOf(Frame(a)), FrameType::kAbort);
  EXPECT_EQ(TypeOf(Frame(ok)), FrameType::kAck);
}

TEST(KvTransferFormatTest, OverlongMessageIsTruncatedToTheCap) {
  const Abort a{RequestId(1), 2, std::string(kMaxMessageSize + 100, 'x')};
  const Abort got = DecodeAs<Abort>(Encode(a));
  EXPECT_EQ(got.message, std::string(kMaxMessageSize, 'x'));
}

TEST(KvTransferFormatTest, TruncationAtEveryOffsetNeedsMoreOrIsDataLoss) {
  for (const Frame& frame : {Frame(TestMetadata()), Frame(TestPage())}) {
    const std::string bytes = Encode(frame);
    for (size_t len = 0; len < bytes.size(); ++len) {
      const std::string cut = bytes.substr(0, len);
      FrameDecoder d;
      d.Feed(cut);
      absl::StatusOr<std::optional<Frame>> next = d.Next();
      ASSERT_TRUE(next.ok()) << "len " << len << ": " << next.status();
      EXPECT_FALSE(next->has_value()) << "len " << len;
      EXPECT_EQ(d.buffered_bytes(), len);
      absl::StatusOr<Frame> one = DecodeOneFrame(cut);
      ASSERT_FALSE(one.ok()) << "len " << len;
      EXPECT_EQ(one.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_NE(one.status().message().find("truncated"),
                absl::string_view::npos)
          << one.status();
    }
  }
}

TEST(KvTransferFormatTest, EveryFlippedBitInAPageFrameIsDetected) {
  const std::string bytes = Encode(TestPage());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::StatusOr<Frame> one = DecodeOneFrame(bad);
      ASSERT_FALSE(one.ok()) << "byte " << i << " bit " << bit;
      ASSERT_EQ(one.status().code(), absl::StatusCode::kDataLoss);
      if (i >= kFrameHeaderSize) {  // the header CRC passes; the page's fails
        ASSERT_NE(one.status().message().find("CRC"), absl::string_view::npos)
            << "byte " << i << ": " << one.status();
      }
      FrameDecoder d;
      d.Feed(bad);
      absl::StatusOr<std::optional<Frame>> next = d.Next();
      ASSERT_FALSE(next.ok()) << "byte " << i << " bit " << bit;
      ASSERT_EQ(next.status().code(), absl::StatusCode::kDataLoss);
    }
  }
}

TEST(KvTransferFormatTest, OversizedPayloadIsRefusedFromTheHeaderAlone) {
  // Only the 16 header bytes exist: the decoder must refuse without waiting
  // for (or reserving) the claimed payload.
  const std::string header =
      RawFrame(static_cast<uint8_t>(FrameType::kPage), "", kProtocolVersion, 0,
               kMaxPayloadSize + 1);
  ASSERT_EQ(header.size(), kFrameHeaderSize);
  FrameDecoder d;
  d.Feed(header);
  absl::StatusOr<std::optional<Frame>> next = d.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(next.status().message().find("exceeds"), absl::string_view::npos);
  EXPECT_EQ(d.buffered_bytes(), kFrameHeaderSize);
  ExpectDataLoss(RawFrame(static_cast<uint8_t>(FrameType::kPage), "",
                          kProtocolVersion, 0, 0xffffffffu),
                 "exceeds");
  // A fixed-size type claiming more than its size is refused the same way.
  ExpectDataLoss(RawFrame(static_cast<uint8_t>(FrameType::kCommit), "",
                          kProtocolVersion, 0, 1 << 20),
                 "payload_size");
}

TEST(KvTransferFormatTest, TwoFramesFedOneByteAtATimeDecodeInOrder) {
  const std::string bytes = Encode(TestMetadata()) + Encode(TestPage());
  FrameDecoder d;
  std::vector<Frame> frames;
  for (char c : bytes) {
    d.Feed(absl::string_view(&c, 1));
    absl::StatusOr<std::optional<Frame>> next = d.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (next->has_value()) frames.push_back(std::move(**next));
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(TypeOf(frames[0]), FrameType::kMetadata);
  EXPECT_EQ(TypeOf(frames[1]), FrameType::kPage);
  EXPECT_EQ(Encode(frames[0]) + Encode(frames[1]), bytes);
  EXPECT_EQ(d.buffered_bytes(), 0u);
}

TEST(KvTransferFormatTest, FramesFedInRandomChunksDecodeInOrder) {
  const std::vector<Frame> sent = {TestMetadata(), TestPage(), TestPage(0),
                                   Commit{RequestId(1), 2, 3, 4},
                                   Ack{RequestId(1), 0, "ok"}};
  std::string bytes;
  for (const Frame& f : sent) EncodeFrame(f, &bytes);
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 50; ++trial) {
    FrameDecoder d;
    std::string decoded;
    size_t pos = 0;
    while (pos < bytes.size()) {
      const size_t n = std::min<size_t>(bytes.size() - pos, 1 + rng() % 700);
      d.Feed(absl::string_view(bytes).substr(pos, n));
      pos += n;
      while (true) {
        absl::StatusOr<std::optional<Frame>> next = d.Next();
        ASSERT_TRUE(next.ok()) << next.status();
        if (!next->has_value()) break;
        EncodeFrame(**next, &decoded);
      }
    }
    EXPECT_EQ(decoded, bytes);
  }
}

// What a gather write sends (the head, the K/V from where it lies, the
// CRC) is the frame EncodeFrame writes, whatever the page's size.
TEST(KvTransferFormatTest, PageHeadKvAndCrcAreTheEncodedFrame) {
  for (uint32_t slots : {0u, 1u, 16u, 300u}) {
    const Page page = TestPage(slots);
    std::string gathered;
    const uint32_t crc = EncodePageHead(page, &gathered);
    EXPECT_EQ(gathered.size(), kPageHeadSize);
    gathered += page.kv_bytes;
    PutFixed32(&gathered, crc);
    EXPECT_EQ(gathered, Encode(page)) << slots << " slots";
  }
}

// Reads straight into the decoder (PrepareFeed, then CommitFeed of what
// the read gave) decode as fed bytes do, with no more buffered than one
// incomplete frame and the last read.
TEST(KvTransferFormatTest,
     FramesReadInPlaceDecodeInOrderWithinOneFrameAndARead) {
  const std::vector<Frame> sent = {TestMetadata(), TestPage(), TestPage(300),
                                   TestPage(0), Commit{RequestId(1), 2, 3, 4}};
  std::string bytes;
  for (int i = 0; i < 20; ++i) {
    for (const Frame& f : sent) EncodeFrame(f, &bytes);
  }
  const size_t largest = Encode(TestPage(300)).size();
  std::mt19937 rng(777);
  for (size_t read_size : {1ul, 100ul, 4096ul, 65536ul}) {
    FrameDecoder d;
    std::string decoded;
    size_t pos = 0;
    while (pos < bytes.size()) {
      char* room = d.PrepareFeed(read_size);
      // A read gives what the socket has: anything up to the room.
      const size_t n =
          std::min<size_t>(bytes.size() - pos, 1 + rng() % read_size);
      std::memcpy(room, bytes.data() + pos, n);
      d.CommitFeed(n);
      pos += n;
      ASSERT_LE(d.buffered_bytes(), largest + read_size);
      while (true) {
        absl::StatusOr<std::optional<Frame>> next = d.Next();
        ASSERT_TRUE(next.ok()) << next.status();
        if (!next->has_value()) break;
        EncodeFrame(**next, &decoded);
      }
      ASSERT_LT(d.buffered_bytes(), largest);
    }
    EXPECT_EQ(decoded, bytes) << "reads of " << read_size;
    EXPECT_EQ(d.buffered_bytes(), 0u);
  }
}

TEST(KvTransferFormatTest, UnknownVersionTypeAndFlagsAreDataLoss) {
  const std::string commit = Encode(Commit{RequestId(1), 2, 3, 4});
  const std::string payload = commit.substr(kFrameHeaderSize);
  // 1: the layout before the page stamp carried its flags.
  ExpectDataLoss(RawFrame(3, payload, /*version=*/1), "unknown version 1");
  ExpectDataLoss(RawFrame(3, payload, /*version=*/2), "unknown version 2");
  // 3: one transfer per connection; a node of version 4 keeps sessions.
  ExpectDataLoss(RawFrame(3, payload, /*version=*/3), "unknown version 3");
  ExpectDataLoss(RawFrame(3, payload, /*version=*/5), "unknown version 5");
  ExpectDataLoss(RawFrame(3, payload, /*version=*/0), "unknown version 0");
  ExpectDataLoss(RawFrame(0, payload), "unknown frame type 0");
  ExpectDataLoss(RawFrame(8, payload), "unknown frame type 8");
  ExpectDataLoss(RawFrame(3, payload, kProtocolVersion, /*flags=*/1), "flags");
  ExpectDataLoss("XXXX" + commit.substr(4), "bad magic");
}

TEST(KvTransferFormatTest, InconsistentPagePayloadsAreDataLoss) {
  const std::string stamp = StampBytes(TestStamp());
  const std::string kv(64, 'k');
  const uint8_t page = static_cast<uint8_t>(FrameType::kPage);
  ExpectDataLoss(RawFrame(page, PagePayload(stamp, 8, 65, kv)), "kv_size 65");
  ExpectDataLoss(RawFrame(page, PagePayload(stamp, 8, 0xffffffffu, kv)),
                 "disagrees");
  ExpectDataLoss(RawFrame(page, PagePayload(stamp, 3, 64, kv)),
                 "not 2 * 3 slots");
  ExpectDataLoss(RawFrame(page, PagePayload(stamp, 0, 64, kv)),
                 "not 2 * 0 slots");
  std::string bad_stamp = stamp;
  bad_stamp[0] ^= 1;
  ExpectDataLoss(RawFrame(page, PagePayload(bad_stamp, 8, 64, kv)),
                 "page stamp: bad magic");
  ExpectDataLoss(RawFrame(page, std::string(40, 'p')), "outside");
}

TEST(KvTransferFormatTest, InconsistentMessagesAreDataLoss) {
  const uint8_t abort = static_cast<uint8_t>(FrameType::kAbort);
  std::string p;
  PutFixed64(&p, 1);
  PutFixed32(&p, 10);
  PutFixed32(&p, 5);
  ExpectDataLoss(RawFrame(abort, p + "abc"), "message_size 5 disagrees");
  ExpectDataLoss(RawFrame(abort, p + "abcdefg"), "message_size 5 disagrees");
  std::string big;
  PutFixed64(&big, 1);
  PutFixed32(&big, 10);
  PutFixed32(&big, kMaxMessageSize + 1);
  ExpectDataLoss(RawFrame(abort, big + "x"), "exceeds 4096");
}

TEST(KvTransferFormatTest, StatusCodesOutsideAbslAndOkAbortsAreDataLoss) {
  ExpectDataLoss(Encode(Abort{RequestId(1), 0, "ok?"}), "status code 0");
  ExpectDataLoss(Encode(Abort{RequestId(1), 17, ""}), "status code 17");
  ExpectDataLoss(Encode(Ack{RequestId(1), 99, ""}), "status code 99");
  EXPECT_EQ(DecodeAs<Ack>(Encode(Ack{RequestId(1), 16, "x"})).code, 16u);
  EXPECT_EQ(DecodeAs<Abort>(Encode(Abort{RequestId(1), 1, "x"})).code, 1u);
}

TEST(KvTransferFormatTest, PageHasTheDocumentedLayout) {
  // docs/kv-transfer.md: index, layer, the 52-byte stamp, slots, kv_size,
  // K/V, page_crc.
  Page p = TestPage(/*slots=*/1);
  p.stamp.set_shared(true);
  const std::string bytes = Encode(p);
  ASSERT_EQ(kPageFixedPayloadSize, 72u);
  ASSERT_EQ(bytes.size(), kFrameHeaderSize + 72 + p.kv_bytes.size());
  const std::string payload = bytes.substr(kFrameHeaderSize);
  WireReader r(payload);
  EXPECT_EQ(r.Fixed32(), p.index);
  EXPECT_EQ(r.Fixed32(), p.layer);
  EXPECT_EQ(r.Bytes(PageStamp::kEncodedSizeBytes), StampBytes(p.stamp));
  EXPECT_EQ(r.Fixed32(), p.slots);
  EXPECT_EQ(r.Fixed32(), p.kv_bytes.size());
  EXPECT_EQ(r.Bytes(p.kv_bytes.size()), p.kv_bytes);
  EXPECT_EQ(r.Fixed32(), Crc32c(payload.data(), payload.size() - 4));
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(KvTransferFormatTest, SharedStampRoundTripsWithItsRealWriter) {
  Page p = TestPage();
  p.stamp.writer.request = RequestId(41);  // the request that computed it
  p.stamp.set_shared(true);
  const Page got = DecodeAs<Page>(Encode(p));
  EXPECT_TRUE(got.stamp.shared());
  EXPECT_EQ(got.stamp.writer.request, RequestId(41));
  EXPECT_EQ(got.stamp.flags, kStampShared);
}

TEST(KvTransferFormatTest, StampWithUnknownFlagsOrOldVersionIsDataLoss) {
  const std::string kv(64, 'k');
  const uint8_t page = static_cast<uint8_t>(FrameType::kPage);
  std::string stamp = StampBytes(TestStamp());
  std::string flags = stamp;
  flags[48] = 2;  // flags word: only bit 0 is defined
  ExpectDataLoss(RawFrame(page, PagePayload(flags, 8, 64, kv)),
                 "page stamp: unknown flags 0x2");
  std::string v1 = stamp;
  v1[4] = 1;  // version 1 stamps have no flags word
  ExpectDataLoss(RawFrame(page, PagePayload(v1, 8, 64, kv)),
                 "page stamp: unknown version 1");
}

TEST(KvTransferFormatTest, MetadataNamingTheReservedRequestIdIsDataLoss) {
  Metadata m = TestMetadata();
  m.request = kReservedRequestId;
  ExpectDataLoss(Encode(m), "request id 18446744073709551615");
  m.request = RequestId(kReservedRequestId.value() - 1);  // the largest real
  EXPECT_EQ(DecodeAs<Metadata>(Encode(m)).request, m.request);
}

TEST(KvTransferFormatTest, TrailingBytesAfterOneFrameAreDataLoss) {
  const std::string bytes = Encode(TestMetadata());
  absl::StatusOr<Frame> f = DecodeOneFrame(bytes + "z");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(f.status().message().find("trailing"), absl::string_view::npos);
}

TEST(KvTransferFormatTest, DecoderStaysFailedAfterAnError) {
  std::string bad = Encode(TestMetadata());
  bad[kFrameHeaderSize - 1] ^= 0x40;  // header CRC
  FrameDecoder d;
  d.Feed(bad);
  ASSERT_FALSE(d.Next().ok());
  d.Feed(Encode(TestMetadata()));
  absl::StatusOr<std::optional<Frame>> again = d.Next();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kvcanary::engine::kv
