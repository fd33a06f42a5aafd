#include "engine/transfer/internal_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/file.h"
#include "common/sha256.h"

namespace kvcanary::engine {
namespace {

constexpr absl::string_view kKvProofLabel = "kvcanary kv-port v4";

template <size_t N>
std::array<uint8_t, N> RandomBytes() {
  std::array<uint8_t, N> out;
  CHECK(RAND_bytes(out.data(), static_cast<int>(N)) == 1);
  return out;
}

}  // namespace

SharedSecret::SharedSecret(std::string secret)
    : secret_(std::move(secret)),
      authorization_digest_(Sha256(AuthorizationHeader())) {}

absl::StatusOr<SharedSecret> SharedSecret::FromFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("secret file ", path, " missing"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("secret file ", path,
                     " is readable by group or others (chmod 600 it)"));
  }
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("cannot read secret file ", text.status().message()));
  }
  std::string secret(absl::StripAsciiWhitespace(*text));
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("secret file ", path, " holds fewer than ",
                     kMinSecretBytes, " characters"));
  }
  return SharedSecret(std::move(secret));
}

SharedSecret SharedSecret::FromString(std::string secret) {
  CHECK(secret.size() >= kMinSecretBytes);
  return SharedSecret(std::move(secret));
}

std::string SharedSecret::Generate() {
  auto bytes = RandomBytes<32>();
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

absl::StatusOr<SharedSecret> SharedSecret::GenerateToFile(
    const std::string& path) {
  const std::string secret = Generate();
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", path));
  }
  const std::string line = secret + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) ==
                  static_cast<ssize_t>(line.size());
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path));
  return SharedSecret(secret);
}

std::string SharedSecret::AuthorizationHeader() const {
  return absl::StrCat("Bearer ", secret_);
}

bool SharedSecret::CheckAuthorization(absl::string_view authorization) const {
  if (secret_.empty()) return false;
  const auto got = Sha256(authorization);
  return CRYPTO_memcmp(authorization_digest_.data(), got.data(), got.size()) ==
         0;
}

SharedSecret::Nonce SharedSecret::NewNonce() { return RandomBytes<16>(); }

SharedSecret::Proof SharedSecret::KvProof(const Nonce& nonce) const {
  CHECK(!secret_.empty());
  std::string message(kKvProofLabel);
  message.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  Proof proof;
  unsigned int len = 0;
  CHECK(HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
             reinterpret_cast<const uint8_t*>(message.data()), message.size(),
             proof.data(), &len) != nullptr);
  CHECK(len == proof.size());
  return proof;
}

bool SharedSecret::CheckKvProof(const Nonce& nonce, const Proof& proof) const {
  if (secret_.empty()) return false;
  const Proof want = KvProof(nonce);
  return CRYPTO_memcmp(want.data(), proof.data(), want.size()) == 0;
}

TransferToken NewTransferToken() { return RandomBytes<16>(); }

std::string TransferTokenHex(const TransferToken& token) {
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(token.data()), token.size()));
}

absl::StatusOr<TransferToken> TransferTokenFromHex(absl::string_view hex) {
  if (hex.size() != 32) {
    return absl::InvalidArgumentError("transfer token is not 32 hex digits");
  }
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError("transfer token is not 32 hex digits");
    }
  }
  const std::string bytes = absl::HexStringToBytes(hex);
  TransferToken t;
  std::copy(bytes.begin(), bytes.end(), t.begin());
  return t;
}

bool SameToken(const TransferToken& a, const TransferToken& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace kvcanary::engine
