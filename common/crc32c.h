// CRC32C (Castagnoli), as used by the KV transfer frames. Abseil 20220623 has
// no absl::crc32c, so this uses the SSE4.2 CRC32 instruction where the CPU has
// it and a table-driven fallback elsewhere; both give identical results.
#ifndef KVCANARY_COMMON_CRC32C_H_
#define KVCANARY_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace kvcanary {

// Extends `crc` (a finished CRC32C of earlier bytes, 0 for none) over `data`.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size_bytes);

inline uint32_t Crc32c(const void* data, size_t size_bytes) {
  return Crc32cExtend(0, data, size_bytes);
}
inline uint32_t Crc32c(absl::string_view data) {
  return Crc32cExtend(0, data.data(), data.size());
}

// The portable path, exposed so tests can compare it with the hardware one.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data,
                              size_t size_bytes);
bool Crc32cHardwareAvailable();

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_CRC32C_H_
