// kvcanary-bench-serving: the disaggregated path's figures.
//
//   build/bin/kvcanary-bench-serving [--transfer_mb 256]
//       [--pages_per_transfer 640] [--transfer_rounds 5] [--requests 64]
//       [--clients 1,8,32] [--max_tokens 32]
//
// Prints the machine, then:
// 1. KV transfer throughput on loopback, side by side in one run, with the
//    thresholds (bench/kv_transfer_bench.h; MB of K/V delivered per
//    second):
//    - framed: whole transfers through KvSender and KvReceiver (handshake,
//      Metadata with the transfer token, Page frames of the 260K model's
//      geometry with their CRC32C, Commit, Ack), in transfers of
//      --pages_per_transfer frames and of 160 (one 512-token prompt), and
//      over mutual TLS;
//    - raw: the same bytes over a plain loopback TCP socket in one bulk
//      send, read as bytes (no CRC computed or checked, no decoding),
//      after the framed figure in each round (the ratio is the median of
//      the rounds' ratios);
//    - CRC32C alone over the same bytes.
//    Any failed transfer, or less delivered than sent, ends the benchmark
//    with exit status 1 and no figures.
// 2. End-to-end request throughput of `kvcanary-engine up` (router, prefill
//    and decode processes, embedded default model) at 1/8/32 concurrent
//    clients.
#include <signal.h>
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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/kv_transfer_bench.h"
#include "bench/machine.h"
#include "common/file.h"
#include "common/text_table.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int, transfer_mb, 256, "MiB of frames to move per transfer figure");
ABSL_FLAG(int, pages_per_transfer, 640,
          "page frames in one transfer (a multiple of the 5 layers)");
ABSL_FLAG(int, transfer_rounds, 5,
          "rounds of the framed and raw figures, each framed then raw; the "
          "medians are printed");
ABSL_FLAG(int, requests, 64, "requests per client count");
ABSL_FLAG(std::string, clients, "1,8,32", "concurrent client counts");
ABSL_FLAG(int, max_tokens, 32, "tokens per request");

namespace kvcanary::engine {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
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
  const absl::Status written = WriteFileAtomically(
      tenants,
      R"({"tenants": [{"id": "a", "api_keys": ["sk-a"]}, {"id": "b", "api_keys": ["sk-b"]}]})",
      0644);
  if (!written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    return;
  }
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
  // Rows are printed as each client count is measured.
  const TextTable table({{"clients", TextTable::kLeft, 8},
                         {"req/s", TextTable::kRight, 10},
                         {"tokens/s", TextTable::kRight, 12},
                         {"mean latency", TextTable::kRight, 14},
                         {"errors", TextTable::kRight, 8}},
                        TextTable::Markdown());
  std::printf("%s", table.HeaderText().c_str());
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
    std::printf(
        "%s", table
                  .RowText({absl::StrCat(clients),
                            absl::StrFormat("%.1f", total / dt),
                            absl::StrFormat("%.0f", tokens.load() / dt),
                            absl::StrFormat(
                                "%.1f ms", 1000.0 * latency_sum.load() / total),
                            absl::StrCat(errors.load())})
                  .c_str());
    std::fflush(stdout);
  }
  kill(up.pid, SIGTERM);
  waitpid(up.pid, nullptr, 0);
}

}  // namespace
}  // namespace kvcanary::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace bench = kvcanary::engine::bench;
  std::printf("# kvcanary-bench-serving\n\nmachine: %s\n",
              kvcanary::bench::MachineLine().c_str());
  bench::TransferBenchOptions transfer;
  transfer.transfer_mb = absl::GetFlag(FLAGS_transfer_mb);
  transfer.pages_per_transfer = absl::GetFlag(FLAGS_pages_per_transfer);
  transfer.rounds = absl::GetFlag(FLAGS_transfer_rounds);
  if (!bench::TransferFigures(transfer)) return 1;
  kvcanary::engine::ServingFigures();
  return 0;
}
