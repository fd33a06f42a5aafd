// Unpredictable bytes for keys, nonces and ids (OpenSSL's RAND_bytes, the
// operating system's generator behind a CSPRNG). CHECK-fails if the
// generator cannot be seeded: no key is ever made from a weak source.
#ifndef KVCANARY_COMMON_RANDOM_H_
#define KVCANARY_COMMON_RANDOM_H_

#include <cstdint>
#include <string>

namespace kvcanary {

// `n` random bytes.
std::string RandomBytes(int n);
// `n` random bytes as 2n lower-case hex characters.
std::string RandomHex(int n);
// A random 64-bit value.
uint64_t RandomU64();

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_RANDOM_H_
