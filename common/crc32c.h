// CRC32C (Castagnoli), as used by the KV transfer frames. Abseil 20220623 has
// no absl::crc32c, so this uses Intel's ISA-L where the build found it
// (carry-less multiply folding, AVX-512 where the CPU has it: tens of GB/s),
// else the SSE4.2 CRC32 instruction in three interleaved streams where the
// CPU has it, else a table; all give identical results.
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

// The other paths, exposed so tests can compare them with each other:
// the table, and the CRC32 instruction (the table where the CPU lacks it).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data,
                              size_t size_bytes);
uint32_t Crc32cExtendInstruction(uint32_t crc, const void* data,
                                 size_t size_bytes);
bool Crc32cHardwareAvailable();
// Whether Crc32cExtend runs through ISA-L (the build found libisal).
bool Crc32cUsesIsal();

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_CRC32C_H_
