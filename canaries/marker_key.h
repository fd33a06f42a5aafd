// Keyed derivation of canary markers. A marker is the string the auditor
// plants in a tenant's prompt and later looks for in every other tenant's
// output; it must be unguessable without the auditor's secret key (so no
// real customer text matches it by chance or by design) and reproducible
// from (tenant, campaign, counter) (so evidence can be re-checked later
// without storing any marker text).
#ifndef KVCANARY_CANARIES_MARKER_KEY_H_
#define KVCANARY_CANARIES_MARKER_KEY_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace kvcanary {

inline constexpr size_t kHmacSha256Bytes = 32;

// HMAC-SHA-256 (RFC 2104 / FIPS 198-1) of `message` under `key`. Any key
// length is accepted, the empty key included (RFC 2104 hashes keys longer
// than the block size). Returns kInvalidArgument if key is longer than
// INT_MAX bytes, kInternal if OpenSSL fails.
absl::StatusOr<std::array<uint8_t, kHmacSha256Bytes>> HmacSha256(
    absl::string_view key, absl::string_view message);

// 256 secret-derived bits from which one canary marker is rendered.
struct MarkerSeed {
  std::array<uint8_t, kHmacSha256Bytes> bytes{};

  friend bool operator==(const MarkerSeed& a, const MarkerSeed& b) {
    return a.bytes == b.bytes;
  }
  friend bool operator!=(const MarkerSeed& a, const MarkerSeed& b) {
    return !(a == b);
  }
};

// Domain-separation label that starts every seed derivation message. Bump
// the version if the encoding below ever changes: old seeds must not be
// silently reinterpreted.
inline constexpr absl::string_view kMarkerSeedLabel = "kvcanary/marker-seed/v1";

// Returns the message that DeriveMarkerSeed authenticates:
//
//   kMarkerSeedLabel                 23 bytes, no terminator
//   tenant_size     fixed64 LE       8 bytes
//   tenant          raw bytes        tenant_size bytes
//   campaign_size   fixed64 LE       8 bytes
//   campaign        raw bytes        campaign_size bytes
//   counter         fixed64 LE       8 bytes
//
// Every variable field is preceded by its length, so distinct
// (tenant, campaign, counter) triples always give distinct messages: e.g.
// ("ab", "c") and ("a", "bc") differ in their first length field. Exposed
// so the encoding can be tested and reproduced by other tools.
std::string EncodeMarkerSeedMessage(absl::string_view tenant,
                                    absl::string_view campaign,
                                    uint64_t counter);

// Returns HMAC-SHA-256(secret_key, EncodeMarkerSeedMessage(tenant, campaign,
// counter)). Deterministic; changing any input changes the seed.
// REQUIRES: secret_key.size() <= INT_MAX. The caller (config loading) is
// expected to reject empty or short secret keys: the seed is only as
// unguessable as the key.
MarkerSeed DeriveMarkerSeed(absl::string_view secret_key,
                            absl::string_view tenant,
                            absl::string_view campaign, uint64_t counter);

// Lower-case hex, two characters per byte.
std::string HexEncode(absl::Span<const uint8_t> bytes);

}  // namespace kvcanary

#endif  // KVCANARY_CANARIES_MARKER_KEY_H_
