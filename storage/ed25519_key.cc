#include "storage/ed25519_key.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/file.h"
#include "common/status_macros.h"

namespace kvcanary::storage {
namespace {

// The last OpenSSL error, for a message.
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace

void Ed25519Key::Free::operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }

Ed25519Key::Ed25519Key(EVP_PKEY* key, bool has_private)
    : key_(key, Free()), has_private_(has_private) {}

absl::StatusOr<Ed25519Key> Ed25519Key::Generate() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nullptr);
  EVP_PKEY* key = nullptr;
  const bool ok = ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 &&
                  EVP_PKEY_keygen(ctx, &key) == 1;
  EVP_PKEY_CTX_free(ctx);
  if (!ok) {
    return absl::InternalError(
        absl::StrCat("Ed25519 key generation failed: ", OpenSslError()));
  }
  return Ed25519Key(key, /*has_private=*/true);
}

absl::StatusOr<Ed25519Key> Ed25519Key::FromPem(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  bool has_private = true;
  EVP_PKEY* key = nullptr;
  if (pem.find("-----BEGIN PUBLIC KEY-----") != absl::string_view::npos) {
    has_private = false;
    key = PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr);
  } else {
    key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  }
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a PEM Ed25519 private (PKCS#8) or public (SPKI) key: ",
        OpenSslError()));
  }
  if (EVP_PKEY_id(key) != EVP_PKEY_ED25519) {
    EVP_PKEY_free(key);
    return absl::InvalidArgumentError("the PEM key is not an Ed25519 key");
  }
  return Ed25519Key(key, has_private);
}

absl::StatusOr<Ed25519Key> Ed25519Key::FromRawPublic(absl::string_view raw) {
  if (raw.size() != kPublicKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("an Ed25519 public key is 32 bytes, not ", raw.size()));
  }
  EVP_PKEY* key = EVP_PKEY_new_raw_public_key(
      EVP_PKEY_ED25519, nullptr,
      reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad Ed25519 public key: ", OpenSslError()));
  }
  return Ed25519Key(key, /*has_private=*/false);
}

absl::StatusOr<Ed25519Key> Ed25519Key::ReadPemFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string pem, ReadFile(path));
  absl::StatusOr<Ed25519Key> key = FromPem(pem);
  if (!key.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", key.status().message()));
  }
  return key;
}

std::string Ed25519Key::RawPublic() const {
  unsigned char raw[kPublicKeyBytes];
  size_t n = sizeof raw;
  CHECK_EQ(EVP_PKEY_get_raw_public_key(key_.get(), raw, &n), 1);
  CHECK_EQ(n, kPublicKeyBytes);
  return std::string(reinterpret_cast<const char*>(raw), n);
}

std::string Ed25519Key::PrivatePem() const {
  CHECK(has_private_);
  BioPtr bio(BIO_new(BIO_s_mem()));
  // PKCS#8, unencrypted: what `openssl genpkey` writes.
  CHECK_EQ(PEM_write_bio_PKCS8PrivateKey(bio.get(), key_.get(), nullptr,
                                         nullptr, 0, nullptr, nullptr),
           1);
  return BioContents(bio.get());
}

std::string Ed25519Key::PublicPem() const {
  BioPtr bio(BIO_new(BIO_s_mem()));
  CHECK_EQ(PEM_write_bio_PUBKEY(bio.get(), key_.get()), 1);
  return BioContents(bio.get());
}

absl::StatusOr<std::string> Ed25519Key::Sign(absl::string_view message) const {
  CHECK(has_private_);
  MdCtxPtr ctx(EVP_MD_CTX_new());
  unsigned char sig[kSignatureBytes];
  size_t sig_len = sizeof sig;
  // Ed25519 hashes internally: no digest (NULL md), one-shot DigestSign.
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) !=
          1 ||
      EVP_DigestSign(ctx.get(), sig, &sig_len,
                     reinterpret_cast<const unsigned char*>(message.data()),
                     message.size()) != 1) {
    return absl::InternalError(
        absl::StrCat("Ed25519 signing failed: ", OpenSslError()));
  }
  return std::string(reinterpret_cast<const char*>(sig), sig_len);
}

bool Ed25519Key::Verify(absl::string_view message,
                        absl::string_view signature) const {
  if (signature.size() != kSignatureBytes) return false;
  MdCtxPtr ctx(EVP_MD_CTX_new());
  const bool ok =
      ctx != nullptr &&
      EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) ==
          1 &&
      EVP_DigestVerify(ctx.get(),
                       reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(),
                       reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) == 1;
  ERR_clear_error();
  return ok;
}

}  // namespace kvcanary::storage
