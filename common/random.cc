#include "common/random.h"

#include <openssl/rand.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "common/check.h"

namespace kvcanary {

std::string RandomBytes(int n) {
  CHECK(n >= 0);
  std::string out(static_cast<size_t>(n), '\0');
  if (n > 0) {
    CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), n) == 1);
  }
  return out;
}

std::string RandomHex(int n) { return absl::BytesToHexString(RandomBytes(n)); }

uint64_t RandomU64() {
  const std::string b = RandomBytes(sizeof(uint64_t));
  uint64_t v = 0;
  std::memcpy(&v, b.data(), sizeof v);
  return v;
}

}  // namespace kvcanary
