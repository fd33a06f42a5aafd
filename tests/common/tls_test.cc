#include "common/tls.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/common/tls_fixtures.h"

namespace kvcanary::tls {
namespace {

using testing::Deployment;
using testing::NonBlockingPair;

// Both ends of a handshake over a socketpair, the server on a thread.
struct HandshakeResult {
  absl::Status server;
  absl::Status client;
};
HandshakeResult Handshake(const Context& server_ctx, const Context& client_ctx,
                          const std::string& peer_host) {
  auto [s, c] = NonBlockingPair();
  HandshakeResult r;
  auto server = Session::Server(server_ctx, s);
  auto client = Session::Client(client_ctx, c, peer_host);
  EXPECT_TRUE(server.ok() && client.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::thread t([&] {
    r.server = HandshakeUntil(**server, s, deadline);
    // A refused peer must hear about it: the alert goes out before close.
    if (!r.server.ok()) ::shutdown(s, SHUT_RDWR);
  });
  r.client = HandshakeUntil(**client, c, deadline);
  // A client that refused the server tells it (an alert) and goes.
  if (!r.client.ok()) ::shutdown(c, SHUT_RDWR);
  t.join();
  if (r.client.ok() && !r.server.ok()) {
    // TLS 1.3: the client finished before the server checked its
    // certificate; the refusal arrives with its first read.
    char byte;
    size_t n = 0;
    Io io;
    while ((io = (*client)->Read(&byte, 1, &n)) == Io::kWantRead &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    if (io != Io::kOk) r.client = absl::UnavailableError("refused");
  }
  ::close(s);
  ::close(c);
  return r;
}

TEST(TlsFilesTest, AllThreeOrNone) {
  EXPECT_TRUE(CheckFiles({}).ok());
  EXPECT_TRUE(CheckFiles({"c", "k", "a"}).ok());
  const absl::Status partial = CheckFiles({"c", "", ""});
  EXPECT_EQ(partial.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(partial.message().find("--tls_key"), std::string::npos);
  EXPECT_NE(partial.message().find("--tls_ca"), std::string::npos);
}

TEST(TlsContextTest, LoadsAGeneratedDeployment) {
  Deployment d;
  auto ctx = Context::Load(d.files);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_NE((*ctx)->ssl_ctx(), nullptr);
  EXPECT_NE((*ctx)->cert(), nullptr);
}

TEST(TlsContextTest, GeneratedKeyIsReadableByItsOwnerOnly) {
  Deployment d;
  struct stat st;
  ASSERT_EQ(::stat(d.files.key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

TEST(TlsContextTest, RefusesTheKeyOfAnotherCertificate) {
  Deployment a, b;
  auto ctx = Context::Load({a.files.cert, b.files.key, a.files.ca});
  EXPECT_EQ(ctx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ctx.status().message().find("private key"), std::string::npos);
}

TEST(TlsContextTest, RefusesACertificateTheCaDidNotSign) {
  Deployment a, b;
  auto ctx = Context::Load({b.files.cert, b.files.key, a.files.ca});
  EXPECT_EQ(ctx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ctx.status().message().find("does not verify against the CA"),
            std::string::npos)
      << ctx.status();
}

TEST(TlsContextTest, RefusesMissingAndCorruptFiles) {
  Deployment d;
  auto missing = Context::Load({d.files.cert, d.files.key, d.dir + "/nope"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(d.dir + "/garbage.pem") << "-----BEGIN CERTIFICATE-----\nxx\n";
  auto corrupt =
      Context::Load({d.dir + "/garbage.pem", d.files.key, d.files.ca});
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TlsSessionTest, PeersOfOneDeploymentHandshakeAndTalk) {
  Deployment d;
  auto ctx = Context::Load(d.files);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  auto [s, c] = NonBlockingPair();
  auto server = Session::Server(**ctx, s);
  auto client = Session::Client(**ctx, c, "127.0.0.1");
  ASSERT_TRUE(server.ok() && client.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  absl::Status server_status;
  std::thread t([&] { server_status = HandshakeUntil(**server, s, deadline); });
  ASSERT_TRUE(HandshakeUntil(**client, c, deadline).ok());
  t.join();
  ASSERT_TRUE(server_status.ok()) << server_status;

  size_t n = 0;
  ASSERT_EQ((*client)->Write("ping", 4, &n), Io::kOk);
  EXPECT_EQ(n, 4u);
  char buf[16];
  Io io;
  while ((io = (*server)->Read(buf, sizeof(buf), &n)) == Io::kWantRead) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(io, Io::kOk);
  EXPECT_EQ(std::string(buf, n), "ping");
  (*client)->SendCloseNotify();
  while ((io = (*server)->Read(buf, sizeof(buf), &n)) == Io::kWantRead) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(io, Io::kClosed);
  ::close(s);
  ::close(c);
}

TEST(TlsSessionTest, ServerRefusesAClientOfAnotherDeployment) {
  Deployment a, b;
  auto ctx_a = Context::Load(a.files);
  ASSERT_TRUE(ctx_a.ok());
  // The client trusts a's CA too, so it is the server that refuses.
  const std::string both = b.dir + "/garbage.pem";
  {
    std::ofstream out(both);
    out << std::ifstream(a.files.ca).rdbuf()
        << std::ifstream(b.files.ca).rdbuf();
  }
  auto ctx_b = Context::Load({b.files.cert, b.files.key, both});
  ASSERT_TRUE(ctx_b.ok()) << ctx_b.status();
  const HandshakeResult r = Handshake(**ctx_a, **ctx_b, "127.0.0.1");
  EXPECT_FALSE(r.client.ok());
  EXPECT_FALSE(r.server.ok());
  EXPECT_NE(r.server.message().find("certificate"), std::string::npos)
      << r.server;
}

TEST(TlsSessionTest, ClientRefusesAServerOfAnotherDeployment) {
  Deployment a, b;
  auto ctx_a = Context::Load(a.files);
  auto ctx_b = Context::Load(b.files);
  ASSERT_TRUE(ctx_a.ok() && ctx_b.ok());
  const HandshakeResult r = Handshake(**ctx_b, **ctx_a, "127.0.0.1");
  EXPECT_FALSE(r.client.ok());
  EXPECT_FALSE(r.server.ok());
}

TEST(TlsSessionTest, ClientRefusesACertificateNamingAnotherHost) {
  Deployment d;
  auto ctx = Context::Load(d.files);
  ASSERT_TRUE(ctx.ok());
  const HandshakeResult r = Handshake(**ctx, **ctx, "db.example.com");
  EXPECT_FALSE(r.client.ok());
  const HandshakeResult by_ip = Handshake(**ctx, **ctx, "10.1.2.3");
  EXPECT_FALSE(by_ip.client.ok());
  const HandshakeResult named = Handshake(**ctx, **ctx, "localhost");
  EXPECT_TRUE(named.client.ok()) << named.client;
  EXPECT_TRUE(named.server.ok()) << named.server;
}

TEST(TlsSessionTest, HandshakeWithASilentPeerTimesOut) {
  Deployment d;
  auto ctx = Context::Load(d.files);
  ASSERT_TRUE(ctx.ok());
  auto [s, c] = NonBlockingPair();
  auto server = Session::Server(**ctx, s);
  ASSERT_TRUE(server.ok());
  const absl::Status st =
      HandshakeUntil(**server, s, absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  ::close(s);
  ::close(c);
}

TEST(TlsSessionTest, PlainBytesAreNotAHandshake) {
  Deployment d;
  auto ctx = Context::Load(d.files);
  ASSERT_TRUE(ctx.ok());
  auto [s, c] = NonBlockingPair();
  auto server = Session::Server(**ctx, s);
  ASSERT_TRUE(server.ok());
  const std::string plain = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::write(c, plain.data(), plain.size()),
            static_cast<ssize_t>(plain.size()));
  const absl::Status st =
      HandshakeUntil(**server, s, absl::Now() + absl::Seconds(5));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  ::close(s);
  ::close(c);
}

}  // namespace
}  // namespace kvcanary::tls
