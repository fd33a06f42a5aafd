#include "auditor/kv_events/wire.h"

#include <exception>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "msgpack.hpp"

namespace kvcanary::auditor::kv_events {
namespace {

constexpr size_t kMaxElements = 1000000;
constexpr size_t kMaxBytes = 64 << 20;
constexpr size_t kMaxDepth = 64;

using Obj = msgpack::object;

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("kv events: ", what));
}

const char* TypeName(const Obj& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "bool";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "int";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "float";
    case msgpack::type::STR:
      return "str";
    case msgpack::type::BIN:
      return "bin";
    case msgpack::type::ARRAY:
      return "array";
    case msgpack::type::MAP:
      return "map";
    default:
      return "ext";
  }
}

absl::Status WrongType(absl::string_view field, const Obj& o) {
  return Bad(absl::StrCat(field, " is a ", TypeName(o)));
}

absl::StatusOr<int64_t> Int(const Obj& o, absl::string_view field) {
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<uint64_t>(INT64_MAX)) {
      return Bad(absl::StrCat(field, " is out of range"));
    }
    return static_cast<int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  return WrongType(field, o);
}

absl::StatusOr<std::optional<int64_t>> OptionalInt(const Obj& o,
                                                   absl::string_view field) {
  if (o.type == msgpack::type::NIL) return std::nullopt;
  ASSIGN_OR_RETURN(const int64_t v, Int(o, field));
  return v;
}

absl::StatusOr<BlockHash> Hash(const Obj& o, absl::string_view field) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER:
      return BlockHash::FromInt(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER:
      return BlockHash::FromInt(static_cast<uint64_t>(o.via.i64));
    case msgpack::type::BIN:
      return BlockHash::FromBytes(
          absl::string_view(o.via.bin.ptr, o.via.bin.size));
    case msgpack::type::STR:  // a hex or other text form: its bytes
      return BlockHash::FromBytes(
          absl::string_view(o.via.str.ptr, o.via.str.size));
    default:
      return WrongType(field, o);
  }
}

// An array of `field`, each element read by `element` (Hash or Int).
template <typename T>
absl::StatusOr<std::vector<T>> ArrayOf(
    const Obj& o, absl::string_view field,
    absl::StatusOr<T> (*element)(const Obj&, absl::string_view)) {
  if (o.type != msgpack::type::ARRAY) return WrongType(field, o);
  std::vector<T> out;
  out.reserve(o.via.array.size);
  for (uint32_t i = 0; i < o.via.array.size; ++i) {
    ASSIGN_OR_RETURN(T v, element(o.via.array.ptr[i], field));
    out.push_back(std::move(v));
  }
  return out;
}

absl::StatusOr<std::vector<BlockHash>> Hashes(const Obj& o,
                                              absl::string_view field) {
  return ArrayOf<BlockHash>(o, field, &Hash);
}

absl::StatusOr<std::vector<int64_t>> Ints(const Obj& o,
                                          absl::string_view field) {
  return ArrayOf<int64_t>(o, field, &Int);
}

std::string Str(const Obj& o) {
  return o.type == msgpack::type::STR
             ? std::string(o.via.str.ptr, o.via.str.size)
             : std::string();
}

std::optional<EventType> TypeFromTag(absl::string_view tag) {
  if (tag == "BlockStored") return EventType::kBlockStored;
  if (tag == "BlockRemoved") return EventType::kBlockRemoved;
  if (tag == "AllBlocksCleared") return EventType::kAllBlocksCleared;
  return std::nullopt;
}

// One field of an event, by name, whichever shape it came in.
absl::Status SetField(Event& e, absl::string_view name, const Obj& v) {
  if (name == "block_hashes") {
    ASSIGN_OR_RETURN(e.block_hashes, Hashes(v, name));
  } else if (name == "parent_block_hash") {
    if (v.type == msgpack::type::NIL) {
      e.parent.reset();
    } else {
      ASSIGN_OR_RETURN(e.parent, Hash(v, name));
    }
  } else if (name == "token_ids") {
    ASSIGN_OR_RETURN(e.token_ids, Ints(v, name));
  } else if (name == "block_size") {
    ASSIGN_OR_RETURN(e.block_size, Int(v, name));
    if (e.block_size < 0) return Bad("block_size is negative");
  } else if (name == "lora_id") {
    ASSIGN_OR_RETURN(e.lora_id, OptionalInt(v, name));
  } else if (name == "medium") {
    if (v.type != msgpack::type::NIL && v.type != msgpack::type::STR) {
      return WrongType(name, v);
    }
    e.medium = Str(v);
  }
  // Other fields (lora_name, extra_keys, group ids, …) carry nothing the
  // ledger keeps.
  return absl::OkStatus();
}

// Positional fields after the tag, per event type (vLLM's struct order;
// omit_defaults may drop trailing ones).
const std::vector<absl::string_view>& PositionalFields(EventType t) {
  static const auto* stored = new std::vector<absl::string_view>{
      "block_hashes", "parent_block_hash", "token_ids",
      "block_size",   "lora_id",           "medium"};
  static const auto* removed =
      new std::vector<absl::string_view>{"block_hashes", "medium"};
  static const auto* cleared = new std::vector<absl::string_view>{};
  switch (t) {
    case EventType::kBlockStored:
      return *stored;
    case EventType::kBlockRemoved:
      return *removed;
    case EventType::kAllBlocksCleared:
      return *cleared;
  }
  return *cleared;
}

absl::Status CheckRequired(const Event& e, bool had_hashes) {
  if (e.type != EventType::kAllBlocksCleared && !had_hashes) {
    return Bad(absl::StrCat(EventTypeName(e.type), " without block_hashes"));
  }
  return absl::OkStatus();
}

// nullopt: an event of a tag this decoder does not know.
absl::StatusOr<std::optional<Event>> DecodeArrayEvent(const Obj& o) {
  if (o.via.array.size == 0) return Bad("an empty event array");
  const Obj& tag = o.via.array.ptr[0];
  if (tag.type != msgpack::type::STR) return WrongType("an event's tag", tag);
  const std::optional<EventType> type = TypeFromTag(Str(tag));
  if (!type.has_value()) return std::optional<Event>();
  Event e;
  e.type = *type;
  const auto& fields = PositionalFields(*type);
  const size_t n = std::min<size_t>(fields.size(), o.via.array.size - 1);
  for (size_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(SetField(e, fields[i], o.via.array.ptr[i + 1]));
  }
  RETURN_IF_ERROR(CheckRequired(e, n >= 1));
  return std::optional<Event>(std::move(e));
}

absl::StatusOr<std::optional<Event>> DecodeMapEvent(const Obj& o) {
  const msgpack::object_kv* kv = o.via.map.ptr;
  const Obj* tag = nullptr;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    if (Str(kv[i].key) == "type") tag = &kv[i].val;
  }
  if (tag == nullptr) return Bad("an event map without \"type\"");
  if (tag->type != msgpack::type::STR)
    return WrongType("an event's type", *tag);
  const std::optional<EventType> type = TypeFromTag(Str(*tag));
  if (!type.has_value()) return std::optional<Event>();
  Event e;
  e.type = *type;
  bool had_hashes = false;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    if (kv[i].key.type != msgpack::type::STR) {
      return WrongType("an event map's key", kv[i].key);
    }
    const std::string name = Str(kv[i].key);
    had_hashes = had_hashes || name == "block_hashes";
    RETURN_IF_ERROR(SetField(e, name, kv[i].val));
  }
  RETURN_IF_ERROR(CheckRequired(e, had_hashes));
  return std::optional<Event>(std::move(e));
}

absl::Status DecodeEvents(const Obj& events, Batch& b) {
  if (events.type != msgpack::type::ARRAY) return WrongType("events", events);
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const Obj& o = events.via.array.ptr[i];
    absl::StatusOr<std::optional<Event>> e;
    if (o.type == msgpack::type::ARRAY) {
      b.array_events = true;
      e = DecodeArrayEvent(o);
    } else if (o.type == msgpack::type::MAP) {
      b.map_events = true;
      e = DecodeMapEvent(o);
    } else {
      return WrongType("an event", o);
    }
    if (!e.ok()) {
      return Bad(absl::StrCat("event ", i, ": ", e.status().message()));
    }
    if (e->has_value()) {
      b.events.push_back(**std::move(e));
    } else {
      ++b.unknown_events;
    }
  }
  return absl::OkStatus();
}

}  // namespace

BlockHash BlockHash::FromInt(uint64_t bits) {
  BlockHash h;
  h.key.resize(9);
  h.key[0] = 'i';
  for (int i = 0; i < 8; ++i) {
    h.key[8 - i] = static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  return h;
}

BlockHash BlockHash::FromBytes(absl::string_view bytes) {
  BlockHash h;
  h.key = absl::StrCat("b", bytes);
  return h;
}

std::string BlockHash::Hex(size_t max_hex) const {
  if (key.empty()) return "";
  std::string hex = absl::BytesToHexString(absl::string_view(key).substr(1));
  if (key[0] == 'i') hex = "0x" + hex;
  if (max_hex > 0 && hex.size() > max_hex) hex = hex.substr(0, max_hex) + "…";
  return hex;
}

const char* EventTypeName(EventType t) {
  switch (t) {
    case EventType::kBlockStored:
      return "BlockStored";
    case EventType::kBlockRemoved:
      return "BlockRemoved";
    case EventType::kAllBlocksCleared:
      return "AllBlocksCleared";
  }
  return "?";
}

absl::StatusOr<Batch> DecodeBatch(absl::string_view payload) {
  msgpack::object_handle handle;
  size_t offset = 0;
  try {
    handle = msgpack::unpack(
        payload.data(), payload.size(), offset, nullptr, nullptr,
        msgpack::unpack_limit(kMaxElements, kMaxElements, kMaxBytes, kMaxBytes,
                              kMaxBytes, kMaxDepth));
  } catch (const std::exception& e) {
    return Bad(absl::StrCat("payload is not msgpack (", e.what(), ")"));
  }
  if (offset != payload.size()) {
    return Bad(absl::StrCat(payload.size() - offset, " bytes after the batch"));
  }
  const Obj& o = handle.get();
  // The batch's fields: positional (every engine seen), or a map keyed by
  // field name (one vLLM revision declares the batch without array_like).
  const Obj* fields[3] = {nullptr, nullptr, nullptr};
  if (o.type == msgpack::type::ARRAY && o.via.array.size >= 2) {
    for (uint32_t i = 0; i < 3 && i < o.via.array.size; ++i) {
      fields[i] = &o.via.array.ptr[i];
    }
  } else if (o.type == msgpack::type::MAP) {
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const std::string key = Str(o.via.map.ptr[i].key);
      const int at = key == "ts"       ? 0
                     : key == "events" ? 1
                     : (key == "data_parallel_rank" || key == "attn_dp_rank")
                         ? 2
                         : -1;
      if (at >= 0) fields[at] = &o.via.map.ptr[i].val;
    }
  }
  if (fields[0] == nullptr || fields[1] == nullptr) {
    return Bad(absl::StrCat("a batch must be [ts, events, dp_rank?], not a ",
                            TypeName(o)));
  }
  Batch b;
  const Obj& ts = *fields[0];
  if (ts.type == msgpack::type::FLOAT64 || ts.type == msgpack::type::FLOAT32) {
    b.ts = ts.via.f64;
  } else if (ts.type == msgpack::type::POSITIVE_INTEGER ||
             ts.type == msgpack::type::NEGATIVE_INTEGER) {
    ASSIGN_OR_RETURN(const int64_t t, Int(ts, "ts"));
    b.ts = static_cast<double>(t);
  } else {
    return WrongType("ts", ts);
  }
  RETURN_IF_ERROR(DecodeEvents(*fields[1], b));
  if (fields[2] != nullptr) {
    ASSIGN_OR_RETURN(b.data_parallel_rank,
                     OptionalInt(*fields[2], "data_parallel_rank"));
  }
  return b;
}

absl::StatusOr<int64_t> DecodeSequence(absl::string_view frame) {
  if (frame.size() != 8) {
    return Bad(absl::StrCat("a sequence frame of ", frame.size(),
                            " bytes (8 expected)"));
  }
  uint64_t v = 0;
  for (unsigned char c : frame) v = (v << 8) | c;
  return static_cast<int64_t>(v);
}

std::string EncodeSequence(int64_t seq) {
  std::string out(8, '\0');
  const uint64_t v = static_cast<uint64_t>(seq);
  for (int i = 0; i < 8; ++i) {
    out[7 - i] = static_cast<char>((v >> (8 * i)) & 0xff);
  }
  return out;
}

}  // namespace kvcanary::auditor::kv_events
