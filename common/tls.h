// Mutual TLS between a deployment's nodes (docs/nodes.md, "Mutual TLS"),
// through OpenSSL: every node holds a certificate signed by the deployment's
// own CA, presents it when it connects or accepts, and refuses a peer whose
// certificate that CA did not sign. A client also checks that the server's
// certificate names the host it dialled (a DNS name or an IP address in its
// subjectAltName).
//
//   ASSIGN_OR_RETURN(std::shared_ptr<const tls::Context> ctx,
//                    tls::Context::Load({cert, key, ca}));
//   ASSIGN_OR_RETURN(auto session, tls::Session::Client(*ctx, fd, host));
//   RETURN_IF_ERROR(tls::HandshakeUntil(*session, fd, deadline));
//
// A session runs over a non-blocking socket the caller owns; its calls never
// block and say which way the socket must become ready before they can go on
// (Io::kWantRead / kWantWrite).
//
// Loading a context makes the process ignore SIGPIPE: OpenSSL writes to its
// sockets with write(2), which would otherwise kill the process when a peer
// resets the connection.
#ifndef KVCANARY_COMMON_TLS_H_
#define KVCANARY_COMMON_TLS_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct x509_st X509;
typedef struct evp_pkey_st EVP_PKEY;

namespace kvcanary::tls {

// The three PEM files of a node's mutual TLS: its certificate, its private
// key, and the deployment CA's certificate. All three or none.
struct Files {
  std::string cert;
  std::string key;
  std::string ca;

  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

// kInvalidArgument naming what is missing unless all three or none are set.
absl::Status CheckFiles(const Files& files);

// A node's TLS identity and trust, loaded once and shared by all its
// connections. Immutable after Load; safe to use from any thread.
class Context {
 public:
  // Reads and checks the files: the key must match the certificate, and
  // the certificate must verify against the CA (a node cannot start with an
  // identity its peers would refuse). TLS 1.2 at least; the peer's
  // certificate is required both ways. kInvalidArgument (with the file and
  // OpenSSL's reason) on any failure.
  static absl::StatusOr<std::shared_ptr<const Context>> Load(
      const Files& files);

  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  SSL_CTX* ssl_ctx() const { return ctx_; }
  const Files& files() const { return files_; }
  // The certificate and key as loaded (for clients that take them parsed,
  // such as cpp-httplib's SSLClient). Owned by the context.
  X509* cert() const { return cert_; }
  EVP_PKEY* key() const { return key_; }

 private:
  Context() = default;

  SSL_CTX* ctx_ = nullptr;
  X509* cert_ = nullptr;
  EVP_PKEY* key_ = nullptr;
  Files files_;
};

// What a non-blocking call did.
enum class Io {
  kOk,         // done (for Read/Write: *n bytes, at least one)
  kWantRead,   // call again once the socket is readable
  kWantWrite,  // call again once the socket is writable
  kClosed,     // the peer ended the stream (close_notify or EOF)
  kFailed,     // a protocol or verification error: see error()
};

// One TLS connection over a socket the caller owns (the session does not
// close it). Not thread-safe: callers serialize its calls.
class Session {
 public:
  // The accepting end: requires and verifies the client's certificate.
  static absl::StatusOr<std::unique_ptr<Session>> Server(const Context& ctx,
                                                         int fd);
  // The connecting end: verifies the server's certificate against the CA
  // and that it names `peer_host` (a DNS name or an IP address).
  static absl::StatusOr<std::unique_ptr<Session>> Client(
      const Context& ctx, int fd, const std::string& peer_host);

  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Io Handshake();
  Io Read(char* buf, size_t size, size_t* n);
  Io Write(const char* buf, size_t size, size_t* n);
  // Sends close_notify once, without waiting for the peer's.
  void SendCloseNotify();
  // Bytes waiting in the session, decrypted or read ahead (the socket may
  // be quiet).
  bool HasBuffered() const;
  // For bulk streams (the KV port): records are written through a buffer
  // of `write_bytes` and read ahead up to `read_bytes` at a time, so that a
  // stream of 16 KiB records costs a system call per buffer, not two per
  // record. Every Write must then be followed by Flush() until it returns
  // kOk before the peer can be expected to see it. Before Handshake; once.
  absl::Status BufferIo(size_t write_bytes, size_t read_bytes);
  // Writes out what the buffer holds: kOk, kWantWrite (call again once the
  // socket is writable) or kFailed. kOk at once without BufferIo.
  Io Flush();
  // Why the last call returned kFailed (OpenSSL's reasons, and the
  // certificate verification result when that was the cause).
  const std::string& error() const { return error_; }

 private:
  explicit Session(SSL* ssl) : ssl_(ssl) {}
  Io Result(int rc);

  SSL* const ssl_;
  std::string error_;
  bool close_notify_sent_ = false;
  bool buffered_ = false;  // BufferIo
};

// Runs the handshake on the non-blocking socket `fd`, polling until
// `deadline`: kDeadlineExceeded, or kUnavailable with the reason it failed
// (a refused certificate, a peer that is not speaking TLS, a reset).
absl::Status HandshakeUntil(Session& session, int fd, absl::Time deadline);

// A fresh deployment CA and one node certificate it signs, written to `dir`
// (which must exist) as ca.pem, node.pem and node.key (0600). The node
// certificate names every entry of `hosts` (DNS names or IP addresses) and
// serves as both client and server. The CA's key is not kept: no further
// certificate can be signed with it. For `up --tls` and tests; a real
// deployment brings its own.
absl::StatusOr<Files> WriteDeploymentCerts(
    const std::string& dir, const std::vector<std::string>& hosts);

}  // namespace kvcanary::tls

#endif  // KVCANARY_COMMON_TLS_H_
