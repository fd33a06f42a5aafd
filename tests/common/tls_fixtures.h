// Test fixtures for mutual TLS (common/tls.h): a fresh deployment (CA and
// node certificate) in a temporary directory, and a non-blocking socket
// pair to run sessions over.
#ifndef KVCANARY_TESTS_COMMON_TLS_FIXTURES_H_
#define KVCANARY_TESTS_COMMON_TLS_FIXTURES_H_

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "common/temp_dir.h"
#include "common/tls.h"
#include "gtest/gtest.h"

namespace kvcanary::tls::testing {

// Certificates naming 127.0.0.1 and localhost, in a private directory under
// $TMPDIR removed with the object.
struct Deployment {
  Deployment() {
    auto made = TempDir::Create("kvcanary-tls-test");
    EXPECT_TRUE(made.ok()) << made.status();
    if (!made.ok()) return;
    temp = std::move(*made);
    dir = temp.path();
    auto written = WriteDeploymentCerts(dir, {"127.0.0.1", "localhost"});
    EXPECT_TRUE(written.ok()) << written.status();
    if (written.ok()) files = *written;
  }
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;

  TempDir temp;
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
