#include "common/trace_event.h"

#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/check.h"

namespace kvcanary {

namespace {

// Version prefixes, indexed by version (0 unused).
constexpr absl::string_view kVersionPrefixes[] = {"", "kvt1", "kvt2"};
constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kU64 = std::numeric_limits<uint64_t>::max();

// Value <-> uint64_t for every field type of TraceEvent.
template <typename Tag, typename Rep>
constexpr uint64_t Raw(StrongId<Tag, Rep> id) {
  return id.value();
}
template <typename T>
constexpr uint64_t Raw(T v) {  // integers, bool, enums
  return static_cast<uint64_t>(v);
}
template <typename Tag, typename Rep>
void Assign(StrongId<Tag, Rep>* id, uint64_t v) {
  *id = StrongId<Tag, Rep>(static_cast<Rep>(v));
}
template <typename T>
void Assign(T* x, uint64_t v) {
  *x = static_cast<T>(v);
}

// An enum field's wire tokens; arrays end with {nullptr, 0}.
struct EnumToken {
  const char* token;
  uint64_t value;
};

// One key=value field: its wire name, and either the largest value it may
// hold (numeric fields) or its tokens (enum fields).
struct FieldSpec {
  const char* name;
  uint64_t max;
  const EnumToken* tokens;
  uint64_t (*get)(const TraceEvent&);
  void (*set)(TraceEvent&, uint64_t);
};

#define KVT_ACCESS(member)                                       \
  [](const TraceEvent& e) -> uint64_t { return Raw(e.member); }, \
      [](TraceEvent& e, uint64_t v) { Assign(&e.member, v); }
#define KVT_NUMBER(name, max, member) \
  FieldSpec { name, max, nullptr, KVT_ACCESS(member) }
#define KVT_ENUM(name, tokens, member) \
  FieldSpec { name, 0, tokens, KVT_ACCESS(member) }

constexpr EnumToken kNodeTokens[] = {
    {"router", Raw(TraceNode::kRouter)},
    {"prefill", Raw(TraceNode::kPrefill)},
    {"decode", Raw(TraceNode::kDecode)},
    {nullptr, 0},
};
constexpr EnumToken kScrubTokens[] = {
    {"none", Raw(TraceScrub::kNone)},
    {"zero", Raw(TraceScrub::kZero)},
    {"poison", Raw(TraceScrub::kPoison)},
    {nullptr, 0},
};
// The same names as ViolationKindName().
constexpr EnumToken kKindTokens[] = {
    {"foreign_tenant_read", Raw(ViolationKind::kForeignTenantRead)},
    {"stale_request_read", Raw(ViolationKind::kStaleRequestRead)},
    {"unwritten_read", Raw(ViolationKind::kUnwrittenRead)},
    {"late_write", Raw(ViolationKind::kLateWrite)},
    {nullptr, 0},
};
constexpr EnumToken kPhaseTokens[] = {
    {"admitted", Raw(TracePhase::kAdmitted)},
    {"prefilling", Raw(TracePhase::kPrefilling)},
    {"transferring", Raw(TracePhase::kTransferring)},
    {"decoding", Raw(TracePhase::kDecoding)},
    {"finished", Raw(TracePhase::kFinished)},
    {nullptr, 0},
};
constexpr EnumToken kReasonTokens[] = {
    {"none", Raw(TraceFinishReason::kNone)},
    {"stop", Raw(TraceFinishReason::kStop)},
    {"length", Raw(TraceFinishReason::kLength)},
    {"transferred", Raw(TraceFinishReason::kTransferred)},
    {"abort", Raw(TraceFinishReason::kAbort)},
    {nullptr, 0},
};

// Header, first on every line.
constexpr FieldSpec kSeq = KVT_NUMBER("seq", kU64, seq);
constexpr FieldSpec kTsUs = KVT_NUMBER("ts_us", kU64, ts_us);
constexpr FieldSpec kNode = KVT_ENUM("node", kNodeTokens, node);
// Page and request identity.
constexpr FieldSpec kPage = KVT_NUMBER("page", kU32, page);
constexpr FieldSpec kGen = KVT_NUMBER("gen", kU32, gen);
constexpr FieldSpec kTenant = KVT_NUMBER("tenant", kU32, tenant);
constexpr FieldSpec kRequest = KVT_NUMBER("request", kU64, request);
// page_free, page_write, page_read.
constexpr FieldSpec kScrub = KVT_ENUM("scrub", kScrubTokens, scrub);
constexpr FieldSpec kFirstSlot = KVT_NUMBER("first_slot", kU32, first_slot);
constexpr FieldSpec kLastSlotExclusive =
    KVT_NUMBER("last_slot_exclusive", kU32, last_slot_exclusive);
constexpr FieldSpec kWriteGen = KVT_NUMBER("writer_gen", kU32, writer_gen);
constexpr FieldSpec kSlots = KVT_NUMBER("slots", kU32, slots);
// violation.
constexpr FieldSpec kKind = KVT_ENUM("kind", kKindTokens, kind);
constexpr FieldSpec kLayer = KVT_NUMBER("layer", kU32, layer);
constexpr FieldSpec kReaderTenant =
    KVT_NUMBER("reader_tenant", kU32, reader.tenant);
constexpr FieldSpec kReaderRequest =
    KVT_NUMBER("reader_request", kU64, reader.request);
constexpr FieldSpec kReaderGen =
    KVT_NUMBER("reader_gen", kU32, reader.generation);
constexpr FieldSpec kWriterTenant =
    KVT_NUMBER("writer_tenant", kU32, writer.tenant);
constexpr FieldSpec kWriterRequest =
    KVT_NUMBER("writer_request", kU64, writer.request);
constexpr FieldSpec kWriterGen =
    KVT_NUMBER("writer_gen", kU32, writer.generation);
constexpr FieldSpec kWriterShared =
    KVT_NUMBER("writer_shared", 1, writer_shared);  // kvt2
constexpr FieldSpec kOwnerTenant =
    KVT_NUMBER("owner_tenant", kU32, owner.tenant);
constexpr FieldSpec kOwnerRequest =
    KVT_NUMBER("owner_request", kU64, owner.request);
constexpr FieldSpec kOwnerGen = KVT_NUMBER("owner_gen", kU32, owner.generation);
constexpr FieldSpec kFilled = KVT_NUMBER("filled", kU32, filled);
// transfer_commit.
constexpr FieldSpec kPagesSent = KVT_NUMBER("pages_sent", kU32, pages_sent);
constexpr FieldSpec kPagesExpected =
    KVT_NUMBER("pages_expected", kU32, pages_expected);
constexpr FieldSpec kTokensSent = KVT_NUMBER("tokens_sent", kU32, tokens_sent);
constexpr FieldSpec kTokensExpected =
    KVT_NUMBER("tokens_expected", kU32, tokens_expected);
constexpr FieldSpec kOk = KVT_NUMBER("ok", 1, ok);
// request.
constexpr FieldSpec kPhase = KVT_ENUM("phase", kPhaseTokens, phase);
constexpr FieldSpec kReason = KVT_ENUM("reason", kReasonTokens, reason);
constexpr FieldSpec kCode =
    KVT_NUMBER("code", Raw(absl::StatusCode::kUnauthenticated), code);
// dropped.
constexpr FieldSpec kCount = KVT_NUMBER("count", kU64, count);

#undef KVT_ENUM
#undef KVT_NUMBER
#undef KVT_ACCESS

// A type's fields in canonical (wire) order; the list ends with nullptr.
constexpr size_t kMaxFields = 20;
struct TypeSpec {
  TraceEventType type;
  const char* name;
  const FieldSpec* fields[kMaxFields];
};

#define KVT_HEADER &kSeq, &kTsUs, &kNode
// The kvt1 types; kvt2 has the same ones, but its violation is
// kViolationV2 (and page_share keeps the writer request in the stamp).
constexpr TypeSpec kTypes[] = {
    {TraceEventType::kPageAlloc,
     "page_alloc",
     {KVT_HEADER, &kPage, &kGen, &kTenant, &kRequest}},
    {TraceEventType::kPageFree,
     "page_free",
     {KVT_HEADER, &kPage, &kGen, &kTenant, &kRequest, &kScrub}},
    {TraceEventType::kPageWrite,
     "page_write",
     {KVT_HEADER, &kPage, &kGen, &kTenant, &kRequest, &kFirstSlot,
      &kLastSlotExclusive, &kWriteGen}},
    {TraceEventType::kPageRead,
     "page_read",
     {KVT_HEADER, &kRequest, &kTenant, &kPage, &kGen, &kSlots}},
    {TraceEventType::kViolation,
     "violation",
     {KVT_HEADER, &kKind, &kLayer, &kPage, &kSlots, &kReaderTenant,
      &kReaderRequest, &kReaderGen, &kWriterTenant, &kWriterRequest,
      &kWriterGen, &kOwnerTenant, &kOwnerRequest, &kOwnerGen, &kFilled}},
    {TraceEventType::kTransferCommit,
     "transfer_commit",
     {KVT_HEADER, &kRequest, &kTenant, &kPagesSent, &kPagesExpected,
      &kTokensSent, &kTokensExpected, &kOk}},
    {TraceEventType::kRequest,
     "request",
     {KVT_HEADER, &kRequest, &kTenant, &kPhase, &kReason, &kCode}},
    {TraceEventType::kDropped, "dropped", {KVT_HEADER, &kCount}},
    {TraceEventType::kPageShare,
     "page_share",
     {KVT_HEADER, &kPage, &kGen, &kTenant, &kRequest}},
};
constexpr TypeSpec kViolationV2 = {
    TraceEventType::kViolation,
    "violation",
    {KVT_HEADER, &kKind, &kLayer, &kPage, &kSlots, &kReaderTenant,
     &kReaderRequest, &kReaderGen, &kWriterTenant, &kWriterRequest, &kWriterGen,
     &kWriterShared, &kOwnerTenant, &kOwnerRequest, &kOwnerGen, &kFilled}};
#undef KVT_HEADER

// A type's spec in `version` (REQUIRES: a known version).
const TypeSpec* Versioned(const TypeSpec* t, uint8_t version) {
  if (t != nullptr && version >= kTraceVersion2 &&
      t->type == TraceEventType::kViolation) {
    return &kViolationV2;
  }
  return t;
}

const TypeSpec* FindType(TraceEventType type, uint8_t version) {
  for (const TypeSpec& t : kTypes) {
    if (t.type == type) return Versioned(&t, version);
  }
  return nullptr;
}

const TypeSpec* FindType(absl::string_view name, uint8_t version) {
  for (const TypeSpec& t : kTypes) {
    if (name == t.name) return Versioned(&t, version);
  }
  return nullptr;
}

bool IsKnownVersion(uint8_t version) {
  return version == kTraceVersion1 || version == kTraceVersion2;
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return false;
    }
  }
  return true;
}

// Quotes `s` for an error message only if it is a short token: a corrupt
// line may hold anything, and error text must never carry free text.
std::string Describe(absl::string_view s) {
  if (IsToken(s) && s.size() <= 64) return absl::StrCat("'", s, "'");
  return absl::StrCat("<", s.size(), " bytes, not a token>");
}

std::string TokenList(const EnumToken* tokens) {
  std::string out;
  for (const EnumToken* t = tokens; t->token != nullptr; ++t) {
    absl::StrAppend(&out, out.empty() ? "" : "|", t->token);
  }
  return out;
}

absl::Status Corrupt(const TypeSpec& type, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("trace line: ", type.name, ": ", what));
}

// Canonical unsigned decimal: digits only, no sign, no leading zero.
enum class ParseResult { kOk, kNotInteger, kOverflow };
ParseResult ParseU64(absl::string_view s, uint64_t* v) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) {
    return ParseResult::kNotInteger;
  }
  uint64_t x = 0;
  bool overflow = false;
  for (char c : s) {
    if (c < '0' || c > '9') return ParseResult::kNotInteger;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (x > (kU64 - d) / 10) overflow = true;
    x = x * 10 + d;
  }
  if (overflow) return ParseResult::kOverflow;
  *v = x;
  return ParseResult::kOk;
}

absl::Status DecodeValue(const TypeSpec& type, const FieldSpec& field,
                         absl::string_view value, TraceEvent* event) {
  if (field.tokens != nullptr) {
    for (const EnumToken* t = field.tokens; t->token != nullptr; ++t) {
      if (value == t->token) {
        field.set(*event, t->value);
        return absl::OkStatus();
      }
    }
    return Corrupt(type, absl::StrCat("bad token ", Describe(value),
                                      " for field '", field.name, "' (want ",
                                      TokenList(field.tokens), ")"));
  }
  uint64_t v = 0;
  const ParseResult parsed = ParseU64(value, &v);
  if (parsed == ParseResult::kNotInteger) {
    return Corrupt(
        type, absl::StrCat("field '", field.name, "' value ", Describe(value),
                           " is not a canonical unsigned decimal "
                           "integer"));
  }
  if (parsed == ParseResult::kOverflow || v > field.max) {
    return Corrupt(
        type, absl::StrCat("field '", field.name, "' value ", Describe(value),
                           " out of range (max ", field.max, ")"));
  }
  field.set(*event, v);
  return absl::OkStatus();
}

}  // namespace

const char* TraceEventTypeName(TraceEventType type) {
  const TypeSpec* t = FindType(type, kTraceVersion1);
  return t == nullptr ? "unknown" : t->name;
}

bool operator==(const TraceEvent& a, const TraceEvent& b) {
  return a.version == b.version && a.type == b.type && a.seq == b.seq &&
         a.ts_us == b.ts_us && a.node == b.node && a.page == b.page &&
         a.gen == b.gen && a.tenant == b.tenant && a.request == b.request &&
         a.scrub == b.scrub && a.first_slot == b.first_slot &&
         a.last_slot_exclusive == b.last_slot_exclusive &&
         a.writer_gen == b.writer_gen && a.slots == b.slots &&
         a.kind == b.kind && a.layer == b.layer && a.reader == b.reader &&
         a.writer == b.writer && a.writer_shared == b.writer_shared &&
         a.owner == b.owner && a.filled == b.filled &&
         a.pages_sent == b.pages_sent && a.pages_expected == b.pages_expected &&
         a.tokens_sent == b.tokens_sent &&
         a.tokens_expected == b.tokens_expected && a.ok == b.ok &&
         a.phase == b.phase && a.reason == b.reason && a.code == b.code &&
         a.count == b.count;
}

std::string TraceEvent::DebugString() const {
  std::string line;
  EncodeTo(*this, &line);
  line.pop_back();
  return line;
}

TraceEvent FromViolation(const WatermarkViolation& v) {
  TraceEvent e;
  e.type = TraceEventType::kViolation;
  e.kind = v.kind;
  e.layer = v.layer;
  e.page = v.page;
  e.slots = v.slots_read;
  e.reader = v.reader;
  e.writer = v.writer;
  e.writer_shared = v.writer_shared;
  e.owner = v.owner;
  e.filled = v.filled;
  return e;
}

absl::StatusOr<WatermarkViolation> ToViolation(const TraceEvent& event) {
  if (event.type != TraceEventType::kViolation) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a violation event: ", TraceEventTypeName(event.type)));
  }
  WatermarkViolation v;
  v.kind = event.kind;
  v.layer = event.layer;
  v.page = event.page;
  v.slots_read = event.slots;
  v.reader = event.reader;
  v.writer = event.writer;
  v.writer_shared = event.writer_shared;
  v.owner = event.owner;
  v.filled = event.filled;
  return v;
}

void EncodeTo(const TraceEvent& event, std::string* out) {
  CHECK(IsKnownVersion(event.version))
      << "trace event version " << int{event.version};
  const TypeSpec* type = FindType(event.type, event.version);
  CHECK(type != nullptr) << "trace event type " << Raw(event.type);
  // kvt1 says "shared" only by the all-ones writer request.
  CHECK(event.version != kTraceVersion1 ||
        event.type != TraceEventType::kViolation ||
        event.writer_shared == (event.writer.request == kReservedRequestId))
      << "a kvt1 violation is writer_shared iff its writer request is "
         "all ones";
  absl::StrAppend(out, kVersionPrefixes[event.version], " ", type->name);
  for (const FieldSpec* const* f = type->fields; *f != nullptr; ++f) {
    const FieldSpec& field = **f;
    const uint64_t v = field.get(event);
    absl::StrAppend(out, " ", field.name, "=");
    if (field.tokens == nullptr) {
      CHECK_LE(v, field.max) << field.name;
      absl::StrAppend(out, v);
      continue;
    }
    const EnumToken* t = field.tokens;
    while (t->token != nullptr && t->value != v) ++t;
    CHECK(t->token != nullptr) << "field " << field.name << " value " << v;
    out->append(t->token);
  }
  out->push_back('\n');
}

absl::StatusOr<TraceEvent> DecodeTraceLine(absl::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (line.size() > kMaxTraceLineBytes) {
    return absl::DataLossError(absl::StrCat("trace line: ", line.size(),
                                            " bytes, over the limit of ",
                                            kMaxTraceLineBytes));
  }
  if (line.find('\n') != absl::string_view::npos) {
    return absl::DataLossError("trace line: newline inside the line");
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  uint8_t version = 0;
  if (parts[0] == kVersionPrefixes[kTraceVersion1]) {
    version = kTraceVersion1;
  } else if (parts[0] == kVersionPrefixes[kTraceVersion2]) {
    version = kTraceVersion2;
  } else {
    return absl::DataLossError(absl::StrCat("trace line: version prefix ",
                                            Describe(parts[0]),
                                            ", want kvt1 or kvt2"));
  }
  if (parts.size() < 2) {
    return absl::DataLossError("trace line: no event type");
  }
  const TypeSpec* type = FindType(parts[1], version);
  if (type == nullptr) {
    return absl::DataLossError(absl::StrCat(
        "trace line: unknown event type ", Describe(parts[1]), " in ",
        kVersionPrefixes[version], " (a new type needs a new version)"));
  }
  TraceEvent event;
  event.version = version;
  event.type = type->type;
  uint32_t seen = 0;  // bit i: type->fields[i] decoded
  for (size_t i = 2; i < parts.size(); ++i) {
    const absl::string_view part = parts[i];
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return Corrupt(*type, absl::StrCat("field ", Describe(part),
                                         " has no '=' (or a stray space)"));
    }
    const absl::string_view key = part.substr(0, eq);
    const absl::string_view value = part.substr(eq + 1);
    size_t index = 0;
    while (type->fields[index] != nullptr && key != type->fields[index]->name) {
      ++index;
    }
    if (type->fields[index] == nullptr) {
      return Corrupt(*type, absl::StrCat("unknown field ", Describe(key)));
    }
    if (seen & (1u << index)) {
      return Corrupt(*type, absl::StrCat("duplicate field ", Describe(key)));
    }
    seen |= 1u << index;
    auto status = DecodeValue(*type, *type->fields[index], value, &event);
    if (!status.ok()) return status;
  }
  for (size_t index = 0; type->fields[index] != nullptr; ++index) {
    if (!(seen & (1u << index))) {
      return Corrupt(*type, absl::StrCat("missing field '",
                                         type->fields[index]->name, "'"));
    }
  }
  if (version == kTraceVersion1 && event.type == TraceEventType::kViolation) {
    event.writer_shared = event.writer.request == kReservedRequestId;
  }
  return event;
}

void TraceLineReader::Feed(absl::string_view bytes) {
  if (!error_.ok()) return;
  if (start_ > 0) {
    buffer_.erase(0, start_);
    scanned_ -= start_;
    start_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
}

absl::StatusOr<std::optional<TraceEvent>> TraceLineReader::Next() {
  if (!error_.ok()) return error_;
  const size_t newline = buffer_.find('\n', scanned_);
  if (newline == std::string::npos) {
    scanned_ = buffer_.size();
    if (buffer_.size() - start_ > kMaxTraceLineBytes) {
      error_ = absl::DataLossError(absl::StrCat(
          "trace stream, line ", lines_ + 1, ": ", buffer_.size() - start_,
          " bytes without a newline, over the limit of ", kMaxTraceLineBytes));
      return error_;
    }
    return std::nullopt;
  }
  const absl::string_view line =
      absl::string_view(buffer_).substr(start_, newline - start_);
  start_ = newline + 1;
  scanned_ = start_;
  ++lines_;
  absl::StatusOr<TraceEvent> event = DecodeTraceLine(line);
  if (!event.ok()) {
    error_ = absl::Status(event.status().code(),
                          absl::StrCat("trace stream, line ", lines_, ": ",
                                       event.status().message()));
    return error_;
  }
  return std::optional<TraceEvent>(*std::move(event));
}

absl::Status TraceLineReader::Finish() const {
  if (!error_.ok()) return error_;
  if (start_ < buffer_.size()) {
    return absl::DataLossError(
        absl::StrCat("trace stream ends inside line ", lines_ + 1, " (",
                     buffer_.size() - start_, " bytes without a newline)"));
  }
  return absl::OkStatus();
}

}  // namespace kvcanary
