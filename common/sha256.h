// SHA-256 (OpenSSL's), as raw bytes and as lower-case hex: how prompts,
// outputs, keys and raw responses appear in evidence, never as text.
#ifndef KVCANARY_COMMON_SHA256_H_
#define KVCANARY_COMMON_SHA256_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace kvcanary {

std::array<uint8_t, 32> Sha256(absl::string_view data);
// Lower-case hex of Sha256(data): 64 characters.
std::string Sha256Hex(absl::string_view data);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_SHA256_H_
