#include "common/json_strict.h"

#include <cstddef>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace kvcanary {
namespace {

using json = nlohmann::json;

// Builds the value as nlohmann's own DOM parser does, and refuses a key
// an open object already has. Not thread-safe; one per parse.
class StrictSax {
 public:
  bool null() { return Value(nullptr); }
  bool boolean(bool v) { return Value(v); }
  bool number_integer(json::number_integer_t v) { return Value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(v); }
  bool number_float(json::number_float_t v, const std::string&) {
    return Value(v);
  }
  bool string(std::string& v) { return Value(std::move(v)); }
  bool binary(json::binary_t& v) { return Value(json::binary(std::move(v))); }

  bool start_object(std::size_t) {
    open_.push_back(Open{Place(json::object()), {}, "", 0});
    return true;
  }
  bool key(std::string& k) {
    Open& o = open_.back();
    if (!o.keys.insert(k).second) {
      duplicate_ = Path(k);
      return false;
    }
    o.key = std::move(k);
    return true;
  }
  bool end_object() {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    open_.push_back(Open{Place(json::array()), {}, "", 0});
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    error_ = bracket == std::string::npos ? what : what.substr(bracket + 2);
    return false;
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }
  // The path of the key found twice; "" if none was.
  const std::string& duplicate() const { return duplicate_; }

 private:
  // An object or array being filled: its members' keys so far, the key of
  // the member being parsed, the index of the next element.
  struct Open {
    json* value;
    std::set<std::string> keys;
    std::string key;
    size_t index;
  };

  // Stores `v` where the parse is, and returns where it went. An element
  // pointer stays valid while it is open: its parent gets no other member
  // until it closes.
  json* Place(json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Open& o = open_.back();
    if (o.value->is_object()) return &((*o.value)[o.key] = std::move(v));
    ++o.index;
    o.value->push_back(std::move(v));
    return &o.value->back();
  }
  bool Value(json v) {
    Place(std::move(v));
    return true;
  }

  // "a.b[2].key" for `key` in the innermost open object.
  std::string Path(const std::string& key) const {
    std::string path;
    for (size_t i = 0; i + 1 < open_.size(); ++i) {
      const Open& o = open_[i];
      if (o.value->is_object()) {
        absl::StrAppend(&path, path.empty() ? "" : ".", o.key);
      } else {
        absl::StrAppend(&path, "[", o.index - 1, "]");
      }
    }
    return absl::StrCat(path, path.empty() ? "" : ".", key);
  }

  json root_;
  std::vector<Open> open_;
  std::string error_;
  std::string duplicate_;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseJsonStrict(std::string_view text) {
  // A raw NUL is never valid JSON (not whitespace, and escaped inside
  // strings), and nlohmann would take it for the end of the input.
  const size_t nul = text.find('\0');
  if (nul != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: a NUL byte at offset ", nul));
  }
  StrictSax sax;
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax,
                                  json::input_format_t::json,
                                  /*strict=*/true);
  if (ok) return std::move(sax.root());
  if (!sax.duplicate().empty()) {
    absl::Status status = absl::InvalidArgumentError(
        absl::StrCat("invalid JSON: duplicate key '", sax.duplicate(), "'"));
    status.SetPayload(kJsonParamUrl, absl::Cord(sax.duplicate()));
    return status;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid JSON: ", sax.error()));
}

}  // namespace kvcanary
