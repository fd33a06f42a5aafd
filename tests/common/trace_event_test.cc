#include "common/trace_event.h"

#include <cstdint>
#include <fstream>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvcanary {

// Readable failures: print an event as its line.
void PrintTo(const TraceEvent& event, std::ostream* os) {
  *os << event.DebugString();
}

namespace {

using ::testing::HasSubstr;

constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

constexpr TraceEventType kAllTypes[] = {
    TraceEventType::kPageAlloc, TraceEventType::kPageFree,
    TraceEventType::kPageWrite, TraceEventType::kPageRead,
    TraceEventType::kViolation, TraceEventType::kTransferCommit,
    TraceEventType::kRequest,   TraceEventType::kDropped,
    TraceEventType::kPageShare,
};
constexpr uint8_t kVersions[] = {kTraceVersion1, kTraceVersion2};

std::string Encode(const TraceEvent& event) {
  std::string line;
  EncodeTo(event, &line);
  return line;
}

StampIdentity Identity(uint32_t tenant, uint64_t request, uint32_t gen) {
  return StampIdentity{RequestId(request), TenantId(tenant),
                       PageGeneration(gen)};
}

// An event of `type` in `version` with every field it uses at its largest
// value (max) or zero (!max), enums at their last or first token; other
// fields default. (A kvt1 violation's writer_shared follows its all-ones
// writer request, so it is `max` in both versions.)
TraceEvent Extreme(TraceEventType type, bool max,
                   uint8_t version = kTraceVersionLatest) {
  const uint32_t u32 = max ? kMax32 : 0;
  const uint64_t u64 = max ? kMax64 : 0;
  TraceEvent e;
  e.version = version;
  e.type = type;
  e.seq = u64;
  e.ts_us = u64;
  e.node = max ? TraceNode::kDecode : TraceNode::kRouter;
  switch (type) {
    case TraceEventType::kPageFree:
      e.scrub = max ? TraceScrub::kPoison : TraceScrub::kNone;
      [[fallthrough]];
    case TraceEventType::kPageAlloc:
    case TraceEventType::kPageShare:
      e.page = PageId(u32);
      e.gen = PageGeneration(u32);
      e.tenant = TenantId(u32);
      e.request = RequestId(u64);
      break;
    case TraceEventType::kPageWrite:
      e.page = PageId(u32);
      e.gen = PageGeneration(u32);
      e.tenant = TenantId(u32);
      e.request = RequestId(u64);
      e.first_slot = u32;
      e.last_slot_exclusive = u32;
      e.writer_gen = PageGeneration(u32);
      break;
    case TraceEventType::kPageRead:
      e.request = RequestId(u64);
      e.tenant = TenantId(u32);
      e.page = PageId(u32);
      e.gen = PageGeneration(u32);
      e.slots = u32;
      break;
    case TraceEventType::kViolation:
      e.kind =
          max ? ViolationKind::kLateWrite : ViolationKind::kForeignTenantRead;
      e.layer = u32;
      e.page = PageId(u32);
      e.slots = u32;
      e.reader = Identity(u32, u64, u32);
      e.writer = Identity(u32, u64, u32);
      e.writer_shared = max;
      e.owner = Identity(u32, u64, u32);
      e.filled = u32;
      break;
    case TraceEventType::kTransferCommit:
      e.request = RequestId(u64);
      e.tenant = TenantId(u32);
      e.pages_sent = u32;
      e.pages_expected = u32;
      e.tokens_sent = u32;
      e.tokens_expected = u32;
      e.ok = max;
      break;
    case TraceEventType::kRequest:
      e.request = RequestId(u64);
      e.tenant = TenantId(u32);
      e.phase = max ? TracePhase::kFinished : TracePhase::kAdmitted;
      e.reason = max ? TraceFinishReason::kAbort : TraceFinishReason::kNone;
      e.code = max ? absl::StatusCode::kUnauthenticated : absl::StatusCode::kOk;
      break;
    case TraceEventType::kDropped:
      e.count = u64;
      break;
  }
  return e;
}

TEST(TraceEventTest, EveryTypeRoundTripsWithExtremeValuesInBothVersions) {
  for (uint8_t version : kVersions) {
    for (TraceEventType type : kAllTypes) {
      for (bool max : {false, true}) {
        const TraceEvent event = Extreme(type, max, version);
        const std::string line = Encode(event);
        SCOPED_TRACE(line);
        ASSERT_EQ(line.substr(0, 5), version == 1 ? "kvt1 " : "kvt2 ");
        ASSERT_EQ(line.back(), '\n');
        ASSERT_LE(line.size() - 1, kMaxTraceLineBytes);
        absl::StatusOr<TraceEvent> decoded = DecodeTraceLine(line);
        ASSERT_TRUE(decoded.ok()) << decoded.status();
        EXPECT_EQ(*decoded, event);
        EXPECT_EQ(decoded->version, version);
        EXPECT_EQ(Encode(*decoded), line);
      }
    }
  }
}

TEST(TraceEventTest, EncodedLinesArePinned) {
  TraceEvent write;
  write.type = TraceEventType::kPageWrite;
  write.seq = 41;
  write.ts_us = 1500;
  write.node = TraceNode::kPrefill;
  write.page = PageId(7);
  write.gen = PageGeneration(3);
  write.tenant = TenantId(2);
  write.request = RequestId(900);
  write.first_slot = 0;
  write.last_slot_exclusive = 16;
  write.writer_gen = PageGeneration(3);
  EXPECT_EQ(Encode(write),
            "kvt2 page_write seq=41 ts_us=1500 node=prefill page=7 gen=3 "
            "tenant=2 request=900 first_slot=0 last_slot_exclusive=16 "
            "writer_gen=3\n");

  TraceEvent violation = Extreme(TraceEventType::kViolation, false);
  violation.seq = 5;
  violation.ts_us = 6;
  violation.node = TraceNode::kDecode;
  violation.kind = ViolationKind::kForeignTenantRead;
  violation.layer = 1;
  violation.page = PageId(7);
  violation.slots = 9;
  violation.reader = Identity(1, 10, 4);
  violation.writer = Identity(2, 20, 3);
  violation.owner = Identity(1, 10, 4);
  violation.filled = 16;
  violation.writer_shared = true;
  EXPECT_EQ(Encode(violation),
            "kvt2 violation seq=5 ts_us=6 node=decode kind=foreign_tenant_read "
            "layer=1 page=7 slots=9 reader_tenant=1 reader_request=10 "
            "reader_gen=4 writer_tenant=2 writer_request=20 writer_gen=3 "
            "writer_shared=1 owner_tenant=1 owner_request=10 owner_gen=4 "
            "filled=16\n");
  violation.version = kTraceVersion1;
  violation.writer_shared = false;
  EXPECT_EQ(Encode(violation),
            "kvt1 violation seq=5 ts_us=6 node=decode kind=foreign_tenant_read "
            "layer=1 page=7 slots=9 reader_tenant=1 reader_request=10 "
            "reader_gen=4 writer_tenant=2 writer_request=20 writer_gen=3 "
            "owner_tenant=1 owner_request=10 owner_gen=4 filled=16\n");

  TraceEvent share;
  share.type = TraceEventType::kPageShare;
  share.seq = 7;
  share.ts_us = 8;
  share.node = TraceNode::kPrefill;
  share.page = PageId(3);
  share.gen = PageGeneration(2);
  share.tenant = TenantId(1);
  share.request = RequestId(850);
  EXPECT_EQ(Encode(share),
            "kvt2 page_share seq=7 ts_us=8 node=prefill page=3 gen=2 tenant=1 "
            "request=850\n");

  TraceEvent request;
  request.type = TraceEventType::kRequest;
  request.seq = 1;
  request.ts_us = 2;
  request.node = TraceNode::kRouter;
  request.request = RequestId(900);
  request.tenant = TenantId(2);
  request.phase = TracePhase::kFinished;
  request.reason = TraceFinishReason::kAbort;
  request.code = absl::StatusCode::kDataLoss;
  EXPECT_EQ(Encode(request),
            "kvt2 request seq=1 ts_us=2 node=router request=900 tenant=2 "
            "phase=finished reason=abort code=15\n");
}

TEST(TraceEventTest, ViolationKindTokensAreTheKindNames) {
  for (ViolationKind kind :
       {ViolationKind::kForeignTenantRead, ViolationKind::kStaleRequestRead,
        ViolationKind::kUnwrittenRead, ViolationKind::kLateWrite}) {
    TraceEvent e = Extreme(TraceEventType::kViolation, false);
    e.kind = kind;
    EXPECT_THAT(Encode(e), HasSubstr(std::string(" kind=") +
                                     ViolationKindName(kind) + " "));
  }
}

TEST(TraceEventTest, DecodeAcceptsAnyFieldOrderAndReencodesCanonically) {
  for (const std::string version : {"kvt1", "kvt2"}) {
    absl::StatusOr<TraceEvent> e = DecodeTraceLine(
        version +
        " page_alloc request=9 page=3 node=decode tenant=1 gen=2 ts_us=5 "
        "seq=4");
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(Encode(*e), version +
                              " page_alloc seq=4 ts_us=5 node=decode page=3 "
                              "gen=2 tenant=1 request=9\n");
  }
}

// A violation line with the reader, writer and owner of `writer_request`,
// in `version`, with `extra` appended.
std::string ViolationLine(const std::string& version,
                          const std::string& writer_request,
                          const std::string& extra = "") {
  return version +
         " violation seq=9 ts_us=10 node=prefill kind=foreign_tenant_read "
         "layer=0 page=4 slots=16 reader_tenant=2 reader_request=31 "
         "reader_gen=5 writer_tenant=1 writer_request=" +
         writer_request + " writer_gen=5" + extra +
         " owner_tenant=1 owner_request=30 owner_gen=5 filled=16\n";
}

TEST(TraceEventTest, Kvt1LinesDecodeAsVersion1AndReencodeToThemselves) {
  for (const std::string& line :
       {ViolationLine("kvt1", "30"), ViolationLine("kvt1", "0"),
        ViolationLine("kvt1", "18446744073709551615"),
        std::string("kvt1 page_share seq=3 ts_us=4 node=prefill page=4 gen=5 "
                    "tenant=1 request=30\n")}) {
    SCOPED_TRACE(line);
    absl::StatusOr<TraceEvent> e = DecodeTraceLine(line);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->version, kTraceVersion1);
    EXPECT_EQ(Encode(*e), line);
  }
}

TEST(TraceEventTest, Kvt1ViolationOfTheAllOnesWriterIsWriterShared) {
  absl::StatusOr<TraceEvent> shared =
      DecodeTraceLine(ViolationLine("kvt1", "18446744073709551615"));
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_TRUE(shared->writer_shared);
  EXPECT_EQ(shared->writer.request, kReservedRequestId);  // kept as it was
  absl::StatusOr<TraceEvent> own = DecodeTraceLine(ViolationLine("kvt1", "30"));
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_FALSE(own->writer_shared);
}

TEST(TraceEventTest, Kvt2ViolationNamesTheRealWriterOfASharedPage) {
  absl::StatusOr<TraceEvent> e =
      DecodeTraceLine(ViolationLine("kvt2", "30", " writer_shared=1"));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->version, kTraceVersion2);
  EXPECT_TRUE(e->writer_shared);
  EXPECT_EQ(e->writer.request, RequestId(30));
  EXPECT_EQ(Encode(*e), ViolationLine("kvt2", "30", " writer_shared=1"));
  // The all-ones id means nothing special in kvt2.
  absl::StatusOr<TraceEvent> ones = DecodeTraceLine(
      ViolationLine("kvt2", "18446744073709551615", " writer_shared=0"));
  ASSERT_TRUE(ones.ok()) << ones.status();
  EXPECT_FALSE(ones->writer_shared);
}

TEST(TraceEventTest, VersionsRefuseEachOthersViolationFields) {
  // kvt2's field in a kvt1 line.
  absl::StatusOr<TraceEvent> v1 =
      DecodeTraceLine(ViolationLine("kvt1", "30", " writer_shared=0"));
  ASSERT_FALSE(v1.ok());
  EXPECT_EQ(v1.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(v1.status().message()),
              HasSubstr("unknown field 'writer_shared'"));
  // A kvt1-shaped violation under the kvt2 prefix.
  absl::StatusOr<TraceEvent> v2 = DecodeTraceLine(ViolationLine("kvt2", "30"));
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(v2.status().message()),
              HasSubstr("missing field 'writer_shared'"));
  absl::StatusOr<TraceEvent> two =
      DecodeTraceLine(ViolationLine("kvt2", "30", " writer_shared=2"));
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(std::string(two.status().message()),
              HasSubstr("'writer_shared' value '2' out of range (max 1)"));
}

TEST(TraceEventTest, EventsOfDifferentVersionsAreNotEqual) {
  TraceEvent v1 = Extreme(TraceEventType::kPageShare, false, kTraceVersion1);
  TraceEvent v2 = Extreme(TraceEventType::kPageShare, false, kTraceVersion2);
  EXPECT_NE(v1, v2);
  v1.version = kTraceVersion2;
  EXPECT_EQ(v1, v2);
}

struct BadLine {
  std::string line;
  std::string error;  // a substring of the message
};

TEST(TraceEventTest, MalformedLinesAreDataLoss) {
  const std::string dropped = "kvt1 dropped seq=1 ts_us=2 node=router";
  const std::vector<BadLine> cases = {
      // Version prefix.
      {"", "version prefix"},
      {"kvt3 dropped seq=1 ts_us=2 node=router count=0",
       "version prefix 'kvt3', want kvt1 or kvt2"},
      {"kvt0 dropped seq=1 ts_us=2 node=router count=0", "version prefix"},
      {"KVT1 dropped seq=1 ts_us=2 node=router count=0", "version prefix"},
      {" kvt1 dropped seq=1 ts_us=2 node=router count=0", "version prefix"},
      // Type.
      {"kvt1", "no event type"},
      {"kvt1 page_move seq=1 ts_us=2 node=router", "unknown event type"},
      {"kvt1 Dropped seq=1 ts_us=2 node=router count=0", "unknown event type"},
      // Missing, unknown, duplicate fields.
      {dropped, "missing field 'count'"},
      {"kvt1 dropped ts_us=2 node=router count=0", "missing field 'seq'"},
      {"kvt1 page_free seq=1 ts_us=2 node=prefill page=1 gen=1 tenant=1 "
       "request=1",
       "missing field 'scrub'"},
      {dropped + " count=0 extra=1", "unknown field 'extra'"},
      {dropped + " count=0 page=1", "unknown field 'page'"},
      {dropped + " count=0 =1", "unknown field <0 bytes"},
      {dropped + " count=0 count=0", "duplicate field 'count'"},
      {dropped + " count=0 seq=1", "duplicate field 'seq'"},
      // Spacing and separators.
      {dropped + "  count=0", "has no '='"},
      {dropped + " count=0 ", "has no '='"},
      {dropped + " count", "has no '='"},
      {dropped + " count=0\r", "not a canonical unsigned decimal"},
      {dropped + " count=0\n\n", "newline inside"},
      // Integers.
      {dropped + " count=", "not a canonical unsigned decimal"},
      {dropped + " count=abc", "not a canonical unsigned decimal"},
      {dropped + " count=-1", "not a canonical unsigned decimal"},
      {dropped + " count=+1", "not a canonical unsigned decimal"},
      {dropped + " count=1.5", "not a canonical unsigned decimal"},
      {dropped + " count=0x10", "not a canonical unsigned decimal"},
      {dropped + " count=007", "not a canonical unsigned decimal"},
      {dropped + " count=18446744073709551616", "out of range"},
      {dropped + " count=99999999999999999999999", "out of range"},
      {"kvt1 page_alloc seq=1 ts_us=2 node=router page=4294967296 gen=1 "
       "tenant=1 request=1",
       "'page' value '4294967296' out of range"},
      {"kvt1 transfer_commit seq=1 ts_us=2 node=prefill request=1 tenant=1 "
       "pages_sent=1 pages_expected=1 tokens_sent=1 tokens_expected=1 ok=2",
       "'ok' value '2' out of range (max 1)"},
      {"kvt1 request seq=1 ts_us=2 node=decode request=1 tenant=1 "
       "phase=finished reason=abort code=17",
       "'code' value '17' out of range (max 16)"},
      // Enum tokens.
      {"kvt1 dropped seq=1 ts_us=2 node=gpu count=0",
       "bad token 'gpu' for field 'node' (want router|prefill|decode)"},
      {"kvt1 dropped seq=1 ts_us=2 node=Router count=0", "bad token <6 bytes"},
      {"kvt1 page_free seq=1 ts_us=2 node=decode page=1 gen=1 tenant=1 "
       "request=1 scrub=2",
       "bad token '2' for field 'scrub'"},
      {"kvt1 request seq=1 ts_us=2 node=decode request=1 tenant=1 "
       "phase=done reason=none code=0",
       "bad token 'done' for field 'phase'"},
      {"kvt1 request seq=1 ts_us=2 node=decode request=1 tenant=1 "
       "phase=finished reason=eos code=0",
       "bad token 'eos' for field 'reason'"},
      {"kvt1 violation seq=1 ts_us=2 node=decode kind=leak layer=0 page=0 "
       "slots=0 reader_tenant=0 reader_request=0 reader_gen=0 "
       "writer_tenant=0 writer_request=0 writer_gen=0 owner_tenant=0 "
       "owner_request=0 owner_gen=0 filled=0",
       "bad token 'leak' for field 'kind'"},
      // Length.
      {dropped + " count=0 " + std::string(kMaxTraceLineBytes, 'x'),
       "over the limit of 4096"},
  };
  for (const BadLine& c : cases) {
    SCOPED_TRACE(c.line.substr(0, 200));
    absl::StatusOr<TraceEvent> e = DecodeTraceLine(c.line);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << e.status();
    EXPECT_THAT(std::string(e.status().message()), HasSubstr(c.error));
  }
}

TEST(TraceEventTest, LengthLimitIsExactlyFourKibibytes) {
  // 4096 bytes (plus its newline) is not refused for its length; 4097 is.
  std::string line = "kvt1 x";
  line.resize(kMaxTraceLineBytes, 'x');
  absl::StatusOr<TraceEvent> at_limit = DecodeTraceLine(line + "\n");
  ASSERT_FALSE(at_limit.ok());
  EXPECT_THAT(std::string(at_limit.status().message()),
              HasSubstr("unknown event type <"));
  absl::StatusOr<TraceEvent> over = DecodeTraceLine(line + "x\n");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(over.status().message()),
              HasSubstr("4097 bytes, over the limit"));
}

TEST(TraceEventTest, ViolationConversionRoundTripPreservesEveryField) {
  WatermarkViolation v;
  v.kind = ViolationKind::kStaleRequestRead;
  v.layer = 11;
  v.page = PageId(12);
  v.slots_read = 13;
  v.reader = Identity(14, 15, 16);
  v.writer = Identity(17, 18, 19);
  v.owner = Identity(20, kMax64, kMax32);
  v.filled = 21;
  v.writer_shared = true;

  TraceEvent e = FromViolation(v);
  EXPECT_EQ(e.type, TraceEventType::kViolation);
  e.seq = 3;
  e.node = TraceNode::kDecode;
  absl::StatusOr<TraceEvent> decoded = DecodeTraceLine(Encode(e));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  absl::StatusOr<WatermarkViolation> back = ToViolation(*decoded);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kind, v.kind);
  EXPECT_EQ(back->layer, v.layer);
  EXPECT_EQ(back->page, v.page);
  EXPECT_EQ(back->slots_read, v.slots_read);
  EXPECT_EQ(back->reader, v.reader);
  EXPECT_EQ(back->writer, v.writer);
  EXPECT_EQ(back->writer_shared, v.writer_shared);
  EXPECT_EQ(back->owner, v.owner);
  EXPECT_EQ(back->filled, v.filled);
  EXPECT_EQ(back->DebugString(), v.DebugString());
}

// Every example line in docs/trace-format.md is a canonical line of its
// version.
TEST(TraceEventTest, DocumentedExampleLinesAreCanonical) {
  std::ifstream in(std::string(KVCANARY_SOURCE_DIR) + "/docs/trace-format.md");
  ASSERT_TRUE(in.good());
  std::string line;
  int examples = 0, kvt1 = 0;
  while (std::getline(in, line)) {
    if (line.rfind("kvt", 0) != 0 || line.find('<') != std::string::npos) {
      continue;  // prose, or the line template
    }
    SCOPED_TRACE(line);
    absl::StatusOr<TraceEvent> e = DecodeTraceLine(line);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(Encode(*e), line + "\n");
    ++examples;
    kvt1 += e->version == kTraceVersion1;
  }
  EXPECT_GT(examples, 20);
  EXPECT_EQ(kvt1, 0) << "the engine emits kvt2; so do the examples";
}

TEST(TraceEventTest, ToViolationRefusesOtherTypes) {
  absl::StatusOr<WatermarkViolation> v =
      ToViolation(Extreme(TraceEventType::kPageRead, false));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
}

// A stream may mix versions (e.g. several emitters merged).
std::vector<TraceEvent> MixedVersionEvents() {
  return {Extreme(TraceEventType::kPageAlloc, true, kTraceVersion1),
          Extreme(TraceEventType::kViolation, false, kTraceVersion2),
          Extreme(TraceEventType::kViolation, true, kTraceVersion1),
          Extreme(TraceEventType::kRequest, true, kTraceVersion2)};
}

TEST(TraceLineReaderTest, SplittingAtEveryOffsetGivesTheSameEvents) {
  const std::vector<TraceEvent> events = MixedVersionEvents();
  std::string stream;
  for (const TraceEvent& e : events) EncodeTo(e, &stream);
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SCOPED_TRACE(cut);
    TraceLineReader reader;
    std::vector<TraceEvent> got;
    for (absl::string_view chunk : {absl::string_view(stream).substr(0, cut),
                                    absl::string_view(stream).substr(cut)}) {
      reader.Feed(chunk);
      while (true) {
        absl::StatusOr<std::optional<TraceEvent>> next = reader.Next();
        ASSERT_TRUE(next.ok()) << next.status();
        if (!next->has_value()) break;
        got.push_back(**next);
      }
    }
    EXPECT_EQ(got, events);
    EXPECT_TRUE(reader.Finish().ok());
  }
}

TEST(TraceLineReaderTest, ByteAtATimeGivesTheSameEvents) {
  const std::vector<TraceEvent> events = MixedVersionEvents();
  std::string stream;
  for (const TraceEvent& e : events) EncodeTo(e, &stream);
  TraceLineReader reader;
  std::vector<TraceEvent> got;
  for (char c : stream) {
    reader.Feed(absl::string_view(&c, 1));
    absl::StatusOr<std::optional<TraceEvent>> next = reader.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    if (next->has_value()) got.push_back(**next);
  }
  EXPECT_EQ(got, events);
}

TEST(TraceLineReaderTest, RefusesAnOverlongLineBeforeItsNewline) {
  TraceLineReader reader;
  reader.Feed(std::string(kMaxTraceLineBytes, 'k'));
  absl::StatusOr<std::optional<TraceEvent>> next = reader.Next();
  ASSERT_TRUE(next.ok());  // 4096 bytes may still end in a newline
  EXPECT_FALSE(next->has_value());
  reader.Feed("k");
  next = reader.Next();
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(next.status().message()),
              HasSubstr("over the limit of 4096"));
}

TEST(TraceLineReaderTest, ACorruptLineIsAStickyErrorNamingTheLine) {
  std::string stream;
  EncodeTo(Extreme(TraceEventType::kDropped, false), &stream);
  stream += "kvt1 page_move seq=1 ts_us=1 node=decode\n";
  EncodeTo(Extreme(TraceEventType::kDropped, true), &stream);
  TraceLineReader reader;
  reader.Feed(stream);
  absl::StatusOr<std::optional<TraceEvent>> next = reader.Next();
  ASSERT_TRUE(next.ok() && next->has_value());
  for (int i = 0; i < 2; ++i) {
    next = reader.Next();
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(next.status().message()),
                HasSubstr("line 2: trace line: unknown event type"));
  }
  EXPECT_FALSE(reader.Finish().ok());
}

TEST(TraceLineReaderTest, FinishReportsATruncatedLastLine) {
  std::string stream;
  EncodeTo(Extreme(TraceEventType::kDropped, false), &stream);
  TraceLineReader reader;
  reader.Feed(absl::string_view(stream).substr(0, stream.size() - 1));
  absl::StatusOr<std::optional<TraceEvent>> next = reader.Next();
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->has_value());
  absl::Status finish = reader.Finish();
  EXPECT_EQ(finish.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(finish.message()), HasSubstr("ends inside line 1"));
}

}  // namespace
}  // namespace kvcanary
