#include "canaries/marker_key.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/check.h"
#include "common/wire.h"

namespace kvcanary {
namespace {

// The oldest queued OpenSSL error as text, or a placeholder; clears the
// thread's error queue so later failures are not misattributed.
std::string TakeOpenSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "no OpenSSL error queued";
  char buffer[256];
  ERR_error_string_n(code, buffer, sizeof(buffer));
  return buffer;
}

}  // namespace

absl::StatusOr<std::array<uint8_t, kHmacSha256Bytes>> HmacSha256(
    absl::string_view key, absl::string_view message) {
  if (key.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HMAC key of ", key.size(), " bytes is too long"));
  }
  // OpenSSL treats a null key pointer as "no key given"; point at a real
  // (empty) buffer so the empty key means the RFC 2104 all-zero key.
  static const unsigned char kEmpty[1] = {0};
  const void* key_data =
      key.empty() ? static_cast<const void*>(kEmpty) : key.data();
  const auto* message_data =
      message.empty() ? kEmpty
                      : reinterpret_cast<const unsigned char*>(message.data());

  std::array<uint8_t, kHmacSha256Bytes> mac;
  unsigned int mac_size = 0;
  if (HMAC(EVP_sha256(), key_data, static_cast<int>(key.size()), message_data,
           message.size(), mac.data(), &mac_size) == nullptr) {
    return absl::InternalError(
        absl::StrCat("HMAC-SHA-256 failed: ", TakeOpenSslError()));
  }
  if (mac_size != kHmacSha256Bytes) {
    return absl::InternalError(absl::StrCat("HMAC-SHA-256 returned ", mac_size,
                                            " bytes, expected ",
                                            kHmacSha256Bytes));
  }
  return mac;
}

std::string EncodeMarkerSeedMessage(absl::string_view tenant,
                                    absl::string_view campaign,
                                    uint64_t counter) {
  std::string message;
  message.reserve(kMarkerSeedLabel.size() + 3 * 8 + tenant.size() +
                  campaign.size());
  message.append(kMarkerSeedLabel.data(), kMarkerSeedLabel.size());
  PutFixed64(&message, tenant.size());
  message.append(tenant.data(), tenant.size());
  PutFixed64(&message, campaign.size());
  message.append(campaign.data(), campaign.size());
  PutFixed64(&message, counter);
  return message;
}

MarkerSeed DeriveMarkerSeed(absl::string_view secret_key,
                            absl::string_view tenant,
                            absl::string_view campaign, uint64_t counter) {
  absl::StatusOr<std::array<uint8_t, kHmacSha256Bytes>> mac = HmacSha256(
      secret_key, EncodeMarkerSeedMessage(tenant, campaign, counter));
  CHECK(mac.ok()) << mac.status();
  MarkerSeed seed;
  seed.bytes = *mac;
  return seed;
}

std::string HexEncode(absl::Span<const uint8_t> bytes) {
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace kvcanary
