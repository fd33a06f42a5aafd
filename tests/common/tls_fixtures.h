// Test fixtures for mutual TLS (common/tls.h): a fresh deployment (CA and
// node certificate) in a temporary directory, and a non-blocking socket
// pair to run sessions over.
#ifndef KVCANARY_TESTS_COMMON_TLS_FIXTURES_H_
#define KVCANARY_TESTS_COMMON_TLS_FIXTURES_H_

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "common/tls.h"
#include "gtest/gtest.h"

namespace kvcanary::tls::testing {

// Certificates naming 127.0.0.1 and localhost, removed with the object.
struct Deployment {
  Deployment() {
    char tmpl[] = "/tmp/kvcanary-tls-test-XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    EXPECT_NE(made, nullptr);
    dir = made != nullptr ? made : "/tmp";
    auto written = WriteDeploymentCerts(dir, {"127.0.0.1", "localhost"});
    EXPECT_TRUE(written.ok()) << written.status();
    if (written.ok()) files = *written;
  }
  ~Deployment() {
    for (const std::string& f :
         {files.cert, files.key, files.ca, dir + "/garbage.pem"}) {
      ::unlink(f.c_str());
    }
    ::rmdir(dir.c_str());
  }
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;

  std::string dir;
  Files files;
};

// A connected stream socket pair, both ends non-blocking.
inline std::pair<int, int> NonBlockingPair() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  for (int fd : fds) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return {fds[0], fds[1]};
}

}  // namespace kvcanary::tls::testing

#endif  // KVCANARY_TESTS_COMMON_TLS_FIXTURES_H_
