// The KV transfer bench's baselines: a loopback TCP pair carrying the page
// frames' bytes in bulk, and the per-byte rates of CRC32C and AES-128-GCM
// over them, with no sockets.
#include "bench/kv_transfer_baselines.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/check.h"
#include "common/crc32c.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_socket.h"

namespace kvcanary::engine::bench {
namespace {

// A connected loopback TCP pair of plain sockets, as the OS sets them up.
absl::Status RawPair(int* client, int* server) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return absl::InternalError("raw listener");
  }
  *client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return absl::InternalError("raw connect");
  }
  *server = accept(l, nullptr, nullptr);
  close(l);
  int one = 1;
  setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return *server >= 0 ? absl::OkStatus() : absl::InternalError("raw accept");
}

// One read of up to `size` bytes; with `poll_first`, a reader that finds no
// data polls for kv::kPollBeforeSleep before it sleeps, as the KV sockets
// wait, so that the framed figure is set against a reader as quick to wake.
ssize_t RawRead(int s, char* buf, size_t size, bool poll_first) {
  const ssize_t n = recv(s, buf, size, MSG_DONTWAIT);
  if (n >= 0 || errno != EAGAIN) return n;
  if (poll_first) {
    pollfd p{s, POLLIN, 0};
    (void)kv::ReadyBeforeSleep(&p, 1, absl::InfiniteFuture());
  }
  return recv(s, buf, size, 0);
}

}  // namespace

Figure RawFigure(const Plan& plan, bool poll_first) {
  int c = -1, s = -1;
  if (absl::Status st = RawPair(&c, &s); !st.ok()) {
    return {0, 0, {st.ToString()}};
  }
  const uint64_t total = uint64_t{plan.stream.size()} * plan.transfers;
  std::atomic<uint64_t> received{0};
  std::thread reader([&] {
    std::vector<char> buf(256 << 10);
    uint64_t got = 0;
    while (got < total) {
      const ssize_t n = RawRead(s, buf.data(), buf.size(), poll_first);
      if (n <= 0) {
        shutdown(s, SHUT_RDWR);  // the sender's writes fail, not block
        break;
      }
      got += static_cast<uint64_t>(n);
    }
    received = got;
  });
  const auto start = Clock::now();
  bool failed = false;
  for (int t = 0; t < plan.transfers && !failed; ++t) {
    for (size_t off = 0; off < plan.stream.size();) {
      const ssize_t n = send(c, plan.stream.data() + off,
                             plan.stream.size() - off, MSG_NOSIGNAL);
      if (n <= 0) {
        failed = true;
        shutdown(c, SHUT_RDWR);
        break;
      }
      off += static_cast<size_t>(n);
    }
  }
  reader.join();
  const double seconds = Seconds(start);
  close(c);
  close(s);
  Figure figure;
  if (received != total) {
    figure.problems.push_back(
        absl::StrCat("raw: received ", received.load(), " of ", total));
  }
  // The K/V those bytes hold, for a figure comparable with the framed ones.
  figure.kv_bytes = static_cast<uint64_t>(
      plan.kv_bytes * (received / static_cast<double>(total)));
  figure.seconds = seconds;
  return figure;
}

double CrcGBps(const Plan& plan) {
  const auto start = Clock::now();
  uint32_t crc = 0;
  for (int t = 0; t < plan.transfers; ++t) {
    crc = Crc32cExtend(crc, plan.stream.data(), plan.stream.size());
  }
  const double seconds = Seconds(start);
  if (crc == 0) std::printf("(crc 0)\n");  // keeps the loop from being elided
  return plan.stream.size() * static_cast<double>(plan.transfers) / 1e9 /
         seconds;
}

double AesGcmMBps(const Plan& plan) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  CHECK(ctx != nullptr);
  unsigned char key[16] = {};
  unsigned char iv[12] = {};
  CHECK_EQ(RAND_bytes(key, sizeof(key)), 1);
  CHECK_EQ(EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), nullptr, key, iv), 1);
  constexpr size_t kRecord = 16384;
  std::vector<unsigned char> out(kRecord + 16);
  unsigned char tag[16];
  uint64_t sealed = 0;
  const auto start = Clock::now();
  for (int t = 0; t < plan.transfers; ++t) {
    const auto* in = reinterpret_cast<const unsigned char*>(plan.stream.data());
    for (size_t at = 0; at < plan.stream.size(); at += kRecord) {
      const int n =
          static_cast<int>(std::min(kRecord, plan.stream.size() - at));
      ++iv[11];  // a new nonce per record, as TLS derives it
      int len = 0;
      CHECK_EQ(EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv), 1);
      CHECK_EQ(EVP_EncryptUpdate(ctx, out.data(), &len, in + at, n), 1);
      CHECK_EQ(EVP_EncryptFinal_ex(ctx, out.data() + len, &len), 1);
      CHECK_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, sizeof(tag), tag),
               1);
      sealed += n;
    }
  }
  const double seconds = Seconds(start);
  EVP_CIPHER_CTX_free(ctx);
  return sealed / 1e6 / seconds;
}

}  // namespace kvcanary::engine::bench
