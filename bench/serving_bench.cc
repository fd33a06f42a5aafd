// kvcanary-bench-serving: the disaggregated path's figures.
//
//   build/bin/kvcanary-bench-serving [--transfer_mb 256] [--requests 64]
//                                    [--clients 1,8,32] [--max_tokens 32]
//
// 1. KV transfer throughput on loopback, side by side in one run (MB of K/V
//    payload per second):
//    - framed: Page frames of the 260K model's geometry through
//      FrameConnection (encode + CRC32C, send, receive, decode + CRC check);
//    - raw: the same encoded bytes over a plain loopback TCP socket, read as
//      bytes (no CRC computed or checked, no decoding);
//    - CRC32C alone over the same bytes.
// 2. End-to-end request throughput of `kvcanary-engine up` (router, prefill
//    and decode processes, embedded default model) at 1/8/32 concurrent
//    clients.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/crc32c.h"
#include "common/tls.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_transfer_format.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int, transfer_mb, 256, "MiB of frames to move per transfer figure");
ABSL_FLAG(int, requests, 64, "requests per client count");
ABSL_FLAG(std::string, clients, "1,8,32", "concurrent client counts");
ABSL_FLAG(int, max_tokens, 32, "tokens per request");

namespace kvcanary::engine {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

kv::Page SamplePage() {
  kv::Page p;
  p.stamp.writer = StampIdentity{RequestId(1), TenantId(1), PageGeneration(1)};
  p.stamp.owner = p.stamp.writer;
  p.slots = 16;
  p.stamp.filled = 16;
  p.kv_bytes.assign(2 * 16 * 4 * 8 * sizeof(float),
                    '\x5a');  // 260K: 4 KV heads x 8
  return p;
}

// A connected loopback TCP pair of plain sockets.
bool RawPair(int* client, int* server) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return false;
  }
  *client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    return false;
  *server = accept(l, nullptr, nullptr);
  close(l);
  int one = 1;
  setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return *server >= 0;
}

void TransferFigures() {
  const kv::Page page = SamplePage();
  std::string frame;
  kv::EncodeFrame(page, &frame);
  const size_t frames =
      (static_cast<size_t>(absl::GetFlag(FLAGS_transfer_mb)) << 20) /
      frame.size();
  const double payload_mb = frames * page.kv_bytes.size() / 1e6;

  // Framed, with CRC on both sides; over mutual TLS when `ctx` is set.
  auto framed_mbps = [&](const tls::Context* ctx) -> double {
    auto listener = kv::FrameListener::Listen("127.0.0.1", 0);
    if (!listener.ok()) return 0;
    std::thread receiver([&] {
      auto conn = (*listener)->Accept(absl::Seconds(10));
      if (conn.ok() && ctx != nullptr &&
          !(*conn)->AcceptTls(*ctx, absl::Seconds(10)).ok()) {
        return;
      }
      for (size_t i = 0; conn.ok() && i < frames; ++i) {
        if (!(*conn)->Receive(absl::Seconds(10)).ok()) return;
      }
    });
    auto conn = kv::FrameConnection::Connect("127.0.0.1", (*listener)->port(),
                                             absl::Seconds(5), ctx);
    const auto t0 = Clock::now();
    for (size_t i = 0; conn.ok() && i < frames; ++i)
      (void)(*conn)->Send(page, absl::Seconds(10));
    receiver.join();
    return payload_mb / Seconds(t0);
  };
  const double framed = framed_mbps(nullptr);
  double framed_tls = 0;
  {
    char dir[] = "/tmp/kvcanary-bench-tls-XXXXXX";
    if (mkdtemp(dir) != nullptr) {
      auto files = tls::WriteDeploymentCerts(dir, {"127.0.0.1"});
      if (files.ok()) {
        auto ctx = tls::Context::Load(*files);
        if (ctx.ok()) framed_tls = framed_mbps(ctx->get());
        for (const std::string& f : {files->cert, files->key, files->ca}) {
          unlink(f.c_str());
        }
      }
      rmdir(dir);
    }
  }
  // Raw bytes, no CRC, no decoding.
  double raw = 0;
  {
    int c, s;
    if (!RawPair(&c, &s)) return;
    const size_t total = frames * frame.size();
    std::thread receiver([&] {
      std::vector<char> buf(1 << 16);
      size_t got = 0;
      while (got < total) {
        const ssize_t n = recv(s, buf.data(), buf.size(), 0);
        if (n <= 0) return;
        got += n;
      }
    });
    const auto t0 = Clock::now();
    for (size_t i = 0; i < frames; ++i) {
      size_t off = 0;
      while (off < frame.size()) {
        const ssize_t n =
            send(c, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += n;
      }
    }
    receiver.join();
    raw = payload_mb / Seconds(t0);
    close(c);
    close(s);
  }
  // CRC32C alone.
  const auto t0 = Clock::now();
  uint32_t crc = 0;
  for (size_t i = 0; i < frames; ++i)
    crc = Crc32cExtend(crc, frame.data(), frame.size());
  const double crc_gbps = frames * frame.size() / 1e9 / Seconds(t0);
  std::printf(
      "\n## KV transfer on loopback (%zu page frames of %zu bytes, 260K "
      "geometry)\n",
      frames, frame.size());
  std::printf("| %-44s | %12s |\n|%s|%s|\n", "figure", "value",
              std::string(46, '-').c_str(), std::string(14, '-').c_str());
  std::printf("| %-44s | %7.0f MB/s |\n",
              "framed, CRC32C per page (K/V payload)", framed);
  std::printf("| %-44s | %7.0f MB/s |\n",
              "framed over mutual TLS (K/V payload)", framed_tls);
  std::printf("| %-44s | %7.0f MB/s |\n",
              "raw bytes, no CRC, no decoding (K/V payload)", raw);
  std::printf("| %-44s | %11.3f  |\n", "framed / raw", framed / raw);
  std::printf("| %-44s | %7.2f GB/s |\n", "CRC32C alone, same bytes", crc_gbps);
  if (crc == 0) std::printf("(crc 0)\n");  // keeps the loop from being elided
}

struct Up {
  pid_t pid = -1;
  std::string router;
};

Up StartUp(const std::string& tenants) {
  int fds[2];
  Up up;
  if (pipe(fds) != 0) return up;
  up.pid = fork();
  if (up.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    const std::string bin = std::string(KVCANARY_BIN_DIR) + "/kvcanary-engine";
    execl(bin.c_str(), bin.c_str(), "up", "--port=0",
          ("--tenants=" + tenants).c_str(), "--max_waiting=1024",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  char ch;
  while (read(fds[0], &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  if (line.rfind("router ", 0) == 0) up.router = line.substr(7);
  return up;
}

void ServingFigures() {
  const std::string tenants = "/tmp/kvcanary-bench-tenants.json";
  FILE* f = std::fopen(tenants.c_str(), "w");
  std::fprintf(
      f,
      R"({"tenants": [{"id": "a", "api_keys": ["sk-a"]}, {"id": "b", "api_keys": ["sk-b"]}]})");
  std::fclose(f);
  Up up = StartUp(tenants);
  if (up.router.empty()) {
    std::fprintf(stderr, "kvcanary-engine up did not start\n");
    return;
  }
  std::printf(
      "\n## End to end through router -> prefill -> decode (embedded model, %d "
      "tokens "
      "per request, %d requests per row)\n",
      absl::GetFlag(FLAGS_max_tokens), absl::GetFlag(FLAGS_requests));
  std::printf("| %-8s | %10s | %12s | %14s | %8s |\n|%s|%s|%s|%s|%s|\n",
              "clients", "req/s", "tokens/s", "mean latency", "errors",
              std::string(10, '-').c_str(), std::string(12, '-').c_str(),
              std::string(14, '-').c_str(), std::string(16, '-').c_str(),
              std::string(10, '-').c_str());
  for (absl::string_view c :
       absl::StrSplit(absl::GetFlag(FLAGS_clients), ',')) {
    int clients = 0;
    if (!absl::SimpleAtoi(c, &clients) || clients < 1) continue;
    const int total = absl::GetFlag(FLAGS_requests);
    std::atomic<int> next{0}, errors{0};
    std::atomic<long> tokens{0};
    std::atomic<double> latency_sum{0};
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < clients; ++t) {
      threads.emplace_back([&, t] {
        httplib::Client client(up.router);
        client.set_read_timeout(120, 0);
        httplib::Headers h = {
            {"Authorization", t % 2 ? "Bearer sk-a" : "Bearer sk-b"}};
        while (true) {
          const int i = next.fetch_add(1);
          if (i >= total) return;
          nlohmann::json j;
          j["prompt"] =
              "request " + std::to_string(i) + " tells a story about a dog";
          j["max_tokens"] = absl::GetFlag(FLAGS_max_tokens);
          j["temperature"] = 0;
          const auto s = Clock::now();
          auto res =
              client.Post("/v1/completions", h, j.dump(), "application/json");
          double l = latency_sum.load();
          while (!latency_sum.compare_exchange_weak(l, l + Seconds(s))) {
          }
          if (!res || res->status != 200) {
            ++errors;
            continue;
          }
          auto body = nlohmann::json::parse(res->body, nullptr, false);
          if (body.is_object())
            tokens += body["usage"]["completion_tokens"].get<int>();
        }
      });
    }
    for (auto& t : threads) t.join();
    const double dt = Seconds(t0);
    std::printf("| %-8d | %10.1f | %12.0f | %11.1f ms | %8d |\n", clients,
                total / dt, tokens.load() / dt,
                1000.0 * latency_sum.load() / total, errors.load());
  }
  kill(up.pid, SIGTERM);
  waitpid(up.pid, nullptr, 0);
}

}  // namespace
}  // namespace kvcanary::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  kvcanary::engine::TransferFigures();
  kvcanary::engine::ServingFigures();
  return 0;
}
