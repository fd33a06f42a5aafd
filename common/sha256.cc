#include "common/sha256.h"

#include <openssl/sha.h>

#include "absl/strings/escaping.h"

namespace kvcanary {

std::array<uint8_t, 32> Sha256(absl::string_view data) {
  std::array<uint8_t, 32> md;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         md.data());
  return md;
}

std::string Sha256Hex(absl::string_view data) {
  const std::array<uint8_t, 32> md = Sha256(data);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(md.data()), md.size()));
}

}  // namespace kvcanary
