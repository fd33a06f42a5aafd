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
//      over mutual TLS, with the session kept between transfers (KV
//      protocol version 4) and with a handshake per transfer; one core's
//      AES-128-GCM rate over the same bytes, and mutual TLS against the
//      lower of it and framed plain, round by round; the CPU each side
//      used per GB, plain and over mutual TLS;
//    - raw: the same bytes over a plain loopback TCP socket in one bulk
//      send, read as bytes (no CRC computed or checked, no decoding),
//      after the framed figure in each round (the ratio is the median of
//      the rounds' ratios);
//    - CRC32C alone over the same bytes.
//    Any failed transfer, or less delivered than sent, ends the benchmark
//    with exit status 1 and no figures.
// 2. End-to-end request throughput of `kvcanary-engine up` (router, prefill
//    and decode processes, embedded default model) at 1/8/32 concurrent
//    clients, with the router's keep-alive connections to the decode node
//    (--node_pool_idle=32, the default) and with a new connection per
//    request (--node_pool_idle=0), plain and over mutual TLS (--tls): four
//    `up`s at once, the two rows of one client count measured one after
//    the other, and the ratio of requests/s kept : new.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
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
#include "common/temp_dir.h"
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

Up StartUp(const std::string& tenants, int pool_idle, bool tls) {
  int fds[2];
  Up up;
  if (pipe(fds) != 0) return up;
  up.pid = fork();
  if (up.pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    const std::string bin = std::string(KVCANARY_BIN_DIR) + "/kvcanary-engine";
    const std::string pool = absl::StrCat("--node_pool_idle=", pool_idle);
    execl(bin.c_str(), bin.c_str(), "up", "--port=0",
          ("--tenants=" + tenants).c_str(), "--max_waiting=1024", pool.c_str(),
          tls ? "--tls" : "--tls=false", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  char ch;
  while (read(fds[0], &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  if (line.rfind("router ", 0) == 0) up.router = line.substr(7);
  return up;
}

struct Row {
  double requests_per_s = 0;
  double tokens_per_s = 0;
  double mean_latency_s = 0;
  int errors = 0;
};

// `total` requests from `clients` concurrent clients against `router`.
Row Measure(const std::string& router, int clients, int total) {
  std::atomic<int> next{0}, errors{0};
  std::atomic<long> tokens{0};
  std::atomic<double> latency_sum{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      httplib::Client client(router);
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
  return {total / dt, tokens.load() / dt, latency_sum.load() / total,
          errors.load()};
}

// Two tenants' file in a private directory under $TMPDIR (removed with
// *dir); "" after printing why if it cannot be written.
std::string WriteTenants(std::optional<TempDir>* dir) {
  absl::StatusOr<TempDir> made = TempDir::Create("kvcanary-bench-serving");
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return "";
  }
  *dir = std::move(*made);
  const std::string tenants = (*dir)->File("tenants.json");
  const absl::Status written = WriteFileAtomically(
      tenants,
      R"({"tenants": [{"id": "a", "api_keys": ["sk-a"]}, {"id": "b", "api_keys": ["sk-b"]}]})",
      0644);
  if (!written.ok()) {
    std::fprintf(stderr, "%s\n", written.ToString().c_str());
    return "";
  }
  return tenants;
}

void ServingFigures() {
  std::optional<TempDir> dir;
  const std::string tenants = WriteTenants(&dir);
  if (tenants.empty()) return;
  struct Deployment {
    const char* name;
    bool tls;
    Up kept, fresh;  // --node_pool_idle=32, and 0
  };
  std::vector<Deployment> deployments = {{"plain", false, {}, {}},
                                         {"mutual TLS", true, {}, {}}};
  for (Deployment& d : deployments) {
    d.kept = StartUp(tenants, 32, d.tls);
    d.fresh = StartUp(tenants, 0, d.tls);
    if (d.kept.router.empty() || d.fresh.router.empty()) {
      std::fprintf(stderr, "kvcanary-engine up did not start\n");
      return;
    }
  }
  std::printf(
      "\n## End to end through router -> prefill -> decode (embedded model, "
      "%d tokens per request, %d requests per row)\n\n"
      "router -> decode: `kept` = keep-alive connections "
      "(--node_pool_idle=32, the default), `new` = a new connection per "
      "request (--node_pool_idle=0); kept : new is the ratio of requests/s, "
      "the two measured one after the other.\n\n",
      absl::GetFlag(FLAGS_max_tokens), absl::GetFlag(FLAGS_requests));
  // Rows are printed as each client count is measured.
  const TextTable table({{"internal plane", TextTable::kLeft, 14},
                         {"clients", TextTable::kLeft, 8},
                         {"router->decode", TextTable::kLeft, 14},
                         {"req/s", TextTable::kRight, 10},
                         {"tokens/s", TextTable::kRight, 10},
                         {"mean latency", TextTable::kRight, 13},
                         {"errors", TextTable::kRight, 7},
                         {"kept : new", TextTable::kRight, 10}},
                        TextTable::Markdown());
  std::printf("%s", table.HeaderText().c_str());
  for (const Deployment& d : deployments) {
    for (absl::string_view c :
         absl::StrSplit(absl::GetFlag(FLAGS_clients), ',')) {
      int clients = 0;
      if (!absl::SimpleAtoi(c, &clients) || clients < 1) continue;
      const int total = absl::GetFlag(FLAGS_requests);
      const Row fresh = Measure(d.fresh.router, clients, total);
      const Row kept = Measure(d.kept.router, clients, total);
      auto print = [&](const char* label, const Row& row,
                       const std::string& ratio) {
        std::printf("%s",
                    table
                        .RowText({d.name, absl::StrCat(clients), label,
                                  absl::StrFormat("%.1f", row.requests_per_s),
                                  absl::StrFormat("%.0f", row.tokens_per_s),
                                  absl::StrFormat("%.2f ms",
                                                  1000.0 * row.mean_latency_s),
                                  absl::StrCat(row.errors), ratio})
                        .c_str());
      };
      print("new", fresh, "");
      print(
          "kept", kept,
          absl::StrFormat("%.2f", kept.requests_per_s / fresh.requests_per_s));
      std::fflush(stdout);
    }
  }
  for (const Deployment& d : deployments) {
    for (const Up& up : {d.kept, d.fresh}) {
      kill(up.pid, SIGTERM);
      waitpid(up.pid, nullptr, 0);
    }
  }
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
