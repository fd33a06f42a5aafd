// Credentials of the engine's internal plane (docs/nodes.md, "Internal
// plane"): a per-deployment secret every internal route and the KV port
// require, the admin token GET /v1/trace requires, and the per-reservation
// transfer token a KV transfer must present.
//
// A secret lives in a file the operator (or `up`) writes: one line, at
// least 32 characters, readable by its owner only. Over HTTP it travels as
// "Authorization: Bearer <secret>"; on the KV port it never travels: the
// receiver sends a fresh nonce and the sender answers with
// HMAC-SHA256(secret, label || nonce). Every comparison is constant-time.
#ifndef KVCANARY_ENGINE_TRANSFER_INTERNAL_AUTH_H_
#define KVCANARY_ENGINE_TRANSFER_INTERNAL_AUTH_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary::engine {

// The shortest secret a file may hold.
inline constexpr size_t kMinSecretBytes = 32;

class SharedSecret {
 public:
  // An unset secret: Check() refuses everything.
  SharedSecret() = default;
  // Reads `path`: kNotFound if missing, kInvalidArgument if shorter than
  // kMinSecretBytes (after trimming the line end) or readable by group or
  // others (chmod 600), naming the file, never its content.
  static absl::StatusOr<SharedSecret> FromFile(const std::string& path);
  // REQUIRES: secret.size() >= kMinSecretBytes.
  static SharedSecret FromString(std::string secret);
  // 32 random bytes from OpenSSL's CSPRNG, as 64 hex characters.
  static std::string Generate();
  // Writes Generate() to a new file `path` with mode 0600.
  static absl::StatusOr<SharedSecret> GenerateToFile(const std::string& path);

  bool set() const { return !secret_.empty(); }
  // "Bearer <secret>".
  std::string AuthorizationHeader() const;
  // Whether `authorization` is "Bearer <secret>", in time independent of
  // where it differs (both sides are hashed before the comparison, so the
  // length does not leak either). False when unset.
  bool CheckAuthorization(absl::string_view authorization) const;

  using Nonce = std::array<uint8_t, 16>;
  using Proof = std::array<uint8_t, 32>;
  static Nonce NewNonce();
  // HMAC-SHA256(secret, "kvcanary kv-port v4" || nonce).
  Proof KvProof(const Nonce& nonce) const;
  bool CheckKvProof(const Nonce& nonce, const Proof& proof) const;

 private:
  explicit SharedSecret(std::string secret);
  std::string secret_;
  // SHA-256 of "Bearer <secret>", computed once: each check hashes only
  // what the caller sent.
  std::array<uint8_t, 32> authorization_digest_{};
};

// A KV reservation's transfer token: 128 random bits the decode node gives
// the prefill node with the request, and the prefill node presents in the
// transfer's Metadata.
using TransferToken = std::array<uint8_t, 16>;
TransferToken NewTransferToken();
std::string TransferTokenHex(const TransferToken& token);
// kInvalidArgument unless 32 hex characters.
absl::StatusOr<TransferToken> TransferTokenFromHex(absl::string_view hex);
// Constant-time equality.
bool SameToken(const TransferToken& a, const TransferToken& b);

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_TRANSFER_INTERNAL_AUTH_H_
