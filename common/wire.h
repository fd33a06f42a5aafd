// Little-endian fixed-width encoding helpers for every wire and disk format.
#ifndef KVCANARY_COMMON_WIRE_H_
#define KVCANARY_COMMON_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace kvcanary {

inline void PutFixed16(std::string* out, uint16_t v) {
  char b[2] = {static_cast<char>(v), static_cast<char>(v >> 8)};
  out->append(b, 2);
}
inline void PutFixed32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out->append(b, 4);
}
inline void PutFixed64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out->append(b, 8);
}

// Reads fixed-width fields from a buffer. Reading past the end is an
// invariant violation: callers check remaining() (or the total size) first.
class WireReader {
 public:
  explicit WireReader(absl::string_view in) : in_(in) {}
  size_t remaining() const { return in_.size() - pos_; }
  uint16_t Fixed16() { return static_cast<uint16_t>(Read(2)); }
  uint32_t Fixed32() { return static_cast<uint32_t>(Read(4)); }
  uint64_t Fixed64() { return Read(8); }
  absl::string_view Bytes(size_t n) {
    Require(n);
    absl::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }

 private:
  void Require(size_t n) {
    if (remaining() < n) __builtin_trap();  // callers size-check first
  }
  uint64_t Read(size_t n) {
    Require(n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i]))
           << (8 * i);
    }
    pos_ += n;
    return v;
  }
  absl::string_view in_;
  size_t pos_ = 0;
};

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_WIRE_H_
