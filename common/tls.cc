#include "common/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvcanary::tls {
namespace {

// OpenSSL's queued reasons on this thread, oldest first, and clears them.
std::string DrainErrors() {
  std::vector<std::string> reasons;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    reasons.emplace_back(buf);
  }
  return reasons.empty() ? "no reason given" : absl::StrJoin(reasons, "; ");
}

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", DrainErrors()));
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<FILE, FileCloser>;

absl::StatusOr<FilePtr> OpenFile(const std::string& path, const char* mode) {
  FilePtr f(std::fopen(path.c_str(), mode));
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  return f;
}

absl::StatusOr<X509*> ReadCert(const std::string& path) {
  ASSIGN_OR_RETURN(FilePtr f, OpenFile(path, "r"));
  X509* cert = PEM_read_X509(f.get(), nullptr, nullptr, nullptr);
  if (cert == nullptr) return Invalid(absl::StrCat("certificate ", path));
  return cert;
}

absl::StatusOr<EVP_PKEY*> ReadKey(const std::string& path) {
  ASSIGN_OR_RETURN(FilePtr f, OpenFile(path, "r"));
  EVP_PKEY* key = PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) return Invalid(absl::StrCat("private key ", path));
  return key;
}

// Whether `cert` verifies against the trust of `ctx` (the CA alone).
absl::Status VerifyAgainstCa(SSL_CTX* ctx, X509* cert,
                             const std::string& path) {
  X509_STORE_CTX* v = X509_STORE_CTX_new();
  CHECK(v != nullptr);
  absl::Status status;
  if (X509_STORE_CTX_init(v, SSL_CTX_get_cert_store(ctx), cert, nullptr) != 1) {
    status = Invalid("verify context");
  } else if (X509_verify_cert(v) != 1) {
    status = absl::InvalidArgumentError(absl::StrCat(
        "certificate ", path, " does not verify against the CA: ",
        X509_verify_cert_error_string(X509_STORE_CTX_get_error(v))));
  }
  X509_STORE_CTX_free(v);
  return status;
}

}  // namespace

absl::Status CheckFiles(const Files& files) {
  if (files.empty()) return absl::OkStatus();
  std::vector<std::string> missing;
  if (files.cert.empty()) missing.push_back("--tls_cert");
  if (files.key.empty()) missing.push_back("--tls_key");
  if (files.ca.empty()) missing.push_back("--tls_ca");
  if (missing.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("mutual TLS needs a certificate, its key and the CA; "
                   "missing ",
                   absl::StrJoin(missing, ", ")));
}

// ---------------------------------------------------------------------------
// Context

absl::StatusOr<std::shared_ptr<const Context>> Context::Load(
    const Files& files) {
  RETURN_IF_ERROR(CheckFiles(files));
  if (files.empty()) {
    return absl::InvalidArgumentError("mutual TLS needs its three files");
  }
  signal(SIGPIPE, SIG_IGN);
  std::shared_ptr<Context> c(new Context());
  c->files_ = files;
  c->ctx_ = SSL_CTX_new(TLS_method());
  if (c->ctx_ == nullptr) return Invalid("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(c->ctx_, TLS1_2_VERSION);
  // A peer that drops the connection without close_notify reads as closed;
  // the protocols above (frame lengths, CRCs, Content-Length) catch a cut.
  SSL_CTX_set_options(c->ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF |
                                   SSL_OP_NO_RENEGOTIATION |
                                   SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(c->ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE |
                                SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                     nullptr);
  // The deployment CA, and nothing from the system's trust store.
  if (SSL_CTX_load_verify_locations(c->ctx_, files.ca.c_str(), nullptr) != 1) {
    return Invalid(absl::StrCat("CA certificate ", files.ca));
  }
  ASSIGN_OR_RETURN(c->cert_, ReadCert(files.cert));
  ASSIGN_OR_RETURN(c->key_, ReadKey(files.key));
  if (SSL_CTX_use_certificate(c->ctx_, c->cert_) != 1) {
    return Invalid(absl::StrCat("certificate ", files.cert));
  }
  if (SSL_CTX_use_PrivateKey(c->ctx_, c->key_) != 1 ||
      SSL_CTX_check_private_key(c->ctx_) != 1) {
    return Invalid(absl::StrCat("private key ", files.key,
                                " (does it belong to ", files.cert, "?)"));
  }
  RETURN_IF_ERROR(VerifyAgainstCa(c->ctx_, c->cert_, files.cert));
  return std::shared_ptr<const Context>(std::move(c));
}

Context::~Context() {
  SSL_CTX_free(ctx_);
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

// ---------------------------------------------------------------------------
// Session

absl::StatusOr<std::unique_ptr<Session>> Session::Server(const Context& ctx,
                                                         int fd) {
  SSL* ssl = SSL_new(ctx.ssl_ctx());
  if (ssl == nullptr) return Invalid("SSL_new");
  std::unique_ptr<Session> s(new Session(ssl));
  if (SSL_set_fd(ssl, fd) != 1) return Invalid("SSL_set_fd");
  SSL_set_accept_state(ssl);
  return s;
}

absl::StatusOr<std::unique_ptr<Session>> Session::Client(
    const Context& ctx, int fd, const std::string& peer_host) {
  SSL* ssl = SSL_new(ctx.ssl_ctx());
  if (ssl == nullptr) return Invalid("SSL_new");
  std::unique_ptr<Session> s(new Session(ssl));
  if (SSL_set_fd(ssl, fd) != 1) return Invalid("SSL_set_fd");
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  unsigned char ip[16];
  const bool is_ip = inet_pton(AF_INET, peer_host.c_str(), ip) == 1 ||
                     inet_pton(AF_INET6, peer_host.c_str(), ip) == 1;
  const int named =
      is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, peer_host.c_str())
            : X509_VERIFY_PARAM_set1_host(param, peer_host.c_str(), 0);
  if (named != 1) return Invalid(absl::StrCat("peer name ", peer_host));
  if (!is_ip) SSL_set_tlsext_host_name(ssl, peer_host.c_str());
  SSL_set_connect_state(ssl);
  return s;
}

Session::~Session() { SSL_free(ssl_); }

Io Session::Result(int rc) {
  const int err = SSL_get_error(ssl_, rc);
  switch (err) {
    case SSL_ERROR_WANT_READ:
      return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      ERR_clear_error();
      return Io::kClosed;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        error_ = errno == 0 ? "the peer closed the connection"
                            : absl::StrCat("socket: ", std::strerror(errno));
        return errno == 0 ? Io::kClosed : Io::kFailed;
      }
      [[fallthrough]];
    default: {
      error_ = DrainErrors();
      const long verify = SSL_get_verify_result(ssl_);
      if (verify != X509_V_OK) {
        absl::StrAppend(&error_, " (certificate: ",
                        X509_verify_cert_error_string(verify), ")");
      }
      return Io::kFailed;
    }
  }
}

Io Session::Handshake() {
  ERR_clear_error();
  errno = 0;
  const int rc = SSL_do_handshake(ssl_);
  return rc == 1 ? Io::kOk : Result(rc);
}

Io Session::Read(char* buf, size_t size, size_t* n) {
  ERR_clear_error();
  errno = 0;
  *n = 0;
  const int rc = SSL_read_ex(ssl_, buf, size, n);
  return rc == 1 ? Io::kOk : Result(rc);
}

Io Session::Write(const char* buf, size_t size, size_t* n) {
  ERR_clear_error();
  errno = 0;
  *n = 0;
  const int rc = SSL_write_ex(ssl_, buf, size, n);
  return rc == 1 ? Io::kOk : Result(rc);
}

void Session::SendCloseNotify() {
  if (close_notify_sent_) return;
  close_notify_sent_ = true;
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);  // best effort: the socket may be full or gone
  if (buffered_) (void)BIO_flush(SSL_get_wbio(ssl_));
  ERR_clear_error();
}

bool Session::HasBuffered() const {
  // SSL_has_pending: records read ahead but not yet decrypted, too.
  return SSL_pending(ssl_) > 0 || SSL_has_pending(ssl_) == 1;
}

absl::Status Session::BufferIo(size_t write_bytes, size_t read_bytes) {
  CHECK(!buffered_) << "BufferIo twice";
  BIO* buffer = BIO_new(BIO_f_buffer());
  if (buffer == nullptr) return Invalid("BIO_new(BIO_f_buffer)");
  // The socket BIO stays the read side; the write side becomes a buffer
  // in front of it (the SSL object then holds one reference to each).
  BIO* socket = SSL_get_rbio(ssl_);
  if (BIO_set_write_buffer_size(buffer, static_cast<long>(write_bytes)) != 1 ||
      BIO_up_ref(socket) != 1) {
    BIO_free(buffer);
    return Invalid("BIO_set_write_buffer_size");
  }
  SSL_set_bio(ssl_, socket, BIO_push(buffer, socket));
  // Reads take whole records, as many as `read_bytes` hold, at once.
  SSL_set_read_ahead(ssl_, 1);
  SSL_set_default_read_buffer_len(ssl_, read_bytes);
  buffered_ = true;
  return absl::OkStatus();
}

Io Session::Flush() {
  if (!buffered_) return Io::kOk;
  ERR_clear_error();
  errno = 0;
  BIO* w = SSL_get_wbio(ssl_);
  if (BIO_flush(w) == 1) return Io::kOk;
  if (BIO_should_retry(w)) return Io::kWantWrite;
  error_ = errno != 0 ? absl::StrCat("socket: ", std::strerror(errno))
                      : DrainErrors();
  return Io::kFailed;
}

absl::Status HandshakeUntil(Session& session, int fd, absl::Time deadline) {
  while (true) {
    const Io io = session.Handshake();
    if (io == Io::kOk) return absl::OkStatus();
    if (io == Io::kClosed || io == Io::kFailed) {
      return absl::UnavailableError(
          absl::StrCat("TLS handshake: ", io == Io::kClosed
                                              ? "the peer closed the connection"
                                              : session.error()));
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("TLS handshake: timed out");
    }
    pollfd p{fd, static_cast<short>(io == Io::kWantRead ? POLLIN : POLLOUT), 0};
    const int64_t ms =
        absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    const int rc = ::poll(&p, 1, ms > INT_MAX ? INT_MAX : static_cast<int>(ms));
    if (rc < 0 && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("TLS handshake: poll: ", std::strerror(errno)));
    }
  }
}

// ---------------------------------------------------------------------------
// Certificates for `up --tls` and tests

namespace {

struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using CertPtr = std::unique_ptr<X509, X509Deleter>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyDeleter>;

absl::StatusOr<KeyPtr> NewKey() {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return Invalid("EC key generation");
  return key;
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const std::string& value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
  if (ext == nullptr) return Invalid(absl::StrCat("extension ", value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return Invalid(absl::StrCat("extension ", value));
  return absl::OkStatus();
}

// A certificate for `key` named `cn`, valid for `days` from an hour ago,
// issued by `issuer` (self-issued when null); the caller signs it.
absl::StatusOr<CertPtr> NewCert(EVP_PKEY* key, const std::string& cn, int days,
                                X509* issuer) {
  CertPtr cert(X509_new());
  CHECK(cert != nullptr);
  X509_set_version(cert.get(), 2);
  unsigned char serial[16];
  CHECK_EQ(RAND_bytes(serial, sizeof(serial)), 1);
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400L * days);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("kvcanary"),
                             -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(
      cert.get(), issuer != nullptr ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer != nullptr ? issuer : cert.get();
  RETURN_IF_ERROR(
      AddExtension(cert.get(), signer, NID_subject_key_identifier, "hash"));
  if (issuer != nullptr) {
    RETURN_IF_ERROR(AddExtension(cert.get(), signer,
                                 NID_authority_key_identifier, "keyid"));
  }
  return cert;
}

absl::Status Sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) == 0) return Invalid("signing");
  return absl::OkStatus();
}

absl::Status WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                        key != nullptr ? 0600 : 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  FilePtr f(fdopen(fd, "w"));
  CHECK(f != nullptr);
  const int ok = key != nullptr
                     ? PEM_write_PrivateKey(f.get(), key, nullptr, nullptr, 0,
                                            nullptr, nullptr)
                     : PEM_write_X509(f.get(), cert);
  if (ok != 1 || std::fflush(f.get()) != 0) {
    return Invalid(absl::StrCat("writing ", path));
  }
  return absl::OkStatus();
}

std::string SubjectAltNames(const std::vector<std::string>& hosts) {
  std::vector<std::string> names;
  absl::flat_hash_set<std::string> seen;
  for (const std::string& h : hosts) {
    if (!seen.insert(h).second) continue;
    unsigned char ip[16];
    const bool is_ip = inet_pton(AF_INET, h.c_str(), ip) == 1 ||
                       inet_pton(AF_INET6, h.c_str(), ip) == 1;
    names.push_back(absl::StrCat(is_ip ? "IP:" : "DNS:", h));
  }
  return absl::StrJoin(names, ",");
}

}  // namespace

absl::StatusOr<Files> WriteDeploymentCerts(
    const std::string& dir, const std::vector<std::string>& hosts) {
  if (hosts.empty()) {
    return absl::InvalidArgumentError("a node certificate needs a host name");
  }
  ASSIGN_OR_RETURN(KeyPtr ca_key, NewKey());
  ASSIGN_OR_RETURN(CertPtr ca, NewCert(ca_key.get(), "kvcanary deployment CA",
                                       3650, nullptr));
  RETURN_IF_ERROR(AddExtension(ca.get(), ca.get(), NID_basic_constraints,
                               "critical,CA:TRUE,pathlen:0"));
  RETURN_IF_ERROR(AddExtension(ca.get(), ca.get(), NID_key_usage,
                               "critical,keyCertSign,cRLSign"));
  RETURN_IF_ERROR(Sign(ca.get(), ca_key.get()));

  ASSIGN_OR_RETURN(KeyPtr node_key, NewKey());
  ASSIGN_OR_RETURN(CertPtr node,
                   NewCert(node_key.get(), "kvcanary node", 825, ca.get()));
  RETURN_IF_ERROR(AddExtension(node.get(), ca.get(), NID_basic_constraints,
                               "critical,CA:FALSE"));
  RETURN_IF_ERROR(AddExtension(node.get(), ca.get(), NID_key_usage,
                               "critical,digitalSignature"));
  RETURN_IF_ERROR(AddExtension(node.get(), ca.get(), NID_ext_key_usage,
                               "serverAuth,clientAuth"));
  RETURN_IF_ERROR(AddExtension(node.get(), ca.get(), NID_subject_alt_name,
                               SubjectAltNames(hosts)));
  RETURN_IF_ERROR(Sign(node.get(), ca_key.get()));

  Files files{dir + "/node.pem", dir + "/node.key", dir + "/ca.pem"};
  RETURN_IF_ERROR(WritePem(files.ca, ca.get(), nullptr));
  RETURN_IF_ERROR(WritePem(files.cert, node.get(), nullptr));
  RETURN_IF_ERROR(WritePem(files.key, nullptr, node_key.get()));
  return files;
}

}  // namespace kvcanary::tls
