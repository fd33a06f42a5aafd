// Helpers of the frame connection tests (kv_connection_test,
// kv_tls_stream_test): pages and frames to send, and a plain socket to
// write raw bytes to a listener.
#ifndef KVCANARY_TESTS_ENGINE_KV_CONNECTION_TEST_UTIL_H_
#define KVCANARY_TESTS_ENGINE_KV_CONNECTION_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "engine/transfer/kv_transfer_format.h"
#include "gtest/gtest.h"

namespace kvcanary::engine::kvtest {

inline constexpr absl::Duration kLong = absl::Seconds(20);

// A plain TCP socket connected to 127.0.0.1:`port` (a listener), for
// writing raw bytes.
inline int RawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}

inline void WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    ASSERT_GT(n, 0);
    done += static_cast<size_t>(n);
  }
}

inline kv::Page BigPage(uint32_t slots, char fill) {
  kv::Page p;
  p.index = slots;
  p.layer = 1;
  p.slots = slots;
  p.kv_bytes.assign(size_t{2} * slots * 4 * 8 * 4, fill);
  return p;
}

inline size_t EncodedSize(const kv::Frame& f) {
  std::string out;
  kv::EncodeFrame(f, &out);
  return out.size();
}

// `n` pages of `slots` slots each (4 KB of K/V at 16 slots), each with its
// own index, layer and bytes.
inline std::vector<kv::Page> ManyPages(size_t n, uint32_t slots = 16) {
  std::vector<kv::Page> pages;
  for (size_t i = 0; i < n; ++i) {
    kv::Page p = BigPage(slots, static_cast<char>('A' + i % 26));
    p.index = static_cast<uint32_t>(i);
    p.layer = static_cast<uint32_t>(i % 5);
    if (!p.kv_bytes.empty()) p.kv_bytes[i % p.kv_bytes.size()] = '#';
    pages.push_back(std::move(p));
  }
  return pages;
}

inline std::string EncodeAll(const std::vector<kv::Page>& pages) {
  std::string out;
  for (const kv::Page& p : pages) kv::EncodeFrame(p, &out);
  return out;
}

}  // namespace kvcanary::engine::kvtest

#endif  // KVCANARY_TESTS_ENGINE_KV_CONNECTION_TEST_UTIL_H_
