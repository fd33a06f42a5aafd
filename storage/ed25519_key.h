// Ed25519 keys through OpenSSL's EVP API, in the files OpenSSL itself reads
// and writes: a PKCS#8 PEM private key ("-----BEGIN PRIVATE KEY-----", what
// `openssl genpkey -algorithm ed25519` writes) and an SPKI PEM public key
// ("-----BEGIN PUBLIC KEY-----", what `openssl pkey -pubout` writes).
// Signatures are pure Ed25519 (RFC 8032) over the whole message: 64 bytes.
#ifndef KVCANARY_STORAGE_ED25519_KEY_H_
#define KVCANARY_STORAGE_ED25519_KEY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

typedef struct evp_pkey_st EVP_PKEY;

namespace kvcanary::storage {

// A private key (can sign and verify) or a public key (can only verify).
// Immutable after construction; safe to share between threads for Verify;
// Sign creates its own context per call.
class Ed25519Key {
 public:
  static constexpr size_t kPublicKeyBytes = 32;
  static constexpr size_t kSignatureBytes = 64;

  // A fresh private key from OpenSSL's CSPRNG.
  static absl::StatusOr<Ed25519Key> Generate();
  // A PEM private key (PKCS#8) or public key (SPKI); kInvalidArgument for
  // anything else, including a key of another algorithm.
  static absl::StatusOr<Ed25519Key> FromPem(absl::string_view pem);
  // The 32-byte RFC 8032 public key.
  static absl::StatusOr<Ed25519Key> FromRawPublic(absl::string_view raw);
  // FromPem of the file's contents; kNotFound / kPermissionDenied naming the
  // path when it cannot be read.
  static absl::StatusOr<Ed25519Key> ReadPemFile(const std::string& path);

  bool has_private() const { return has_private_; }
  // The 32-byte RFC 8032 public key.
  std::string RawPublic() const;
  // PKCS#8 PEM. REQUIRES: has_private().
  std::string PrivatePem() const;
  std::string PublicPem() const;  // SPKI PEM

  // The 64-byte signature of `message`. REQUIRES: has_private().
  absl::StatusOr<std::string> Sign(absl::string_view message) const;
  // True iff `signature` is this key's valid signature of `message`.
  bool Verify(absl::string_view message, absl::string_view signature) const;

 private:
  struct Free {
    void operator()(EVP_PKEY* k) const;
  };
  Ed25519Key(EVP_PKEY* key, bool has_private);

  std::shared_ptr<EVP_PKEY> key_;
  bool has_private_ = false;
};

}  // namespace kvcanary::storage

#endif  // KVCANARY_STORAGE_ED25519_KEY_H_
