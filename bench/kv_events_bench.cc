#include "bench/kv_events_bench.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "auditor/kv_events/ledger.h"
#include "auditor/kv_events/subscriber.h"
#include "auditor/kv_events/wire.h"
#include "tests/auditor/fakes/fake_kv_publisher.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvcanary::bench {
namespace {

using auditor::testing::EncodeBatch;
using auditor::testing::FakeEvent;
using Clock = std::chrono::steady_clock;

constexpr int kEventsPerBatch = 4;  // as a busy vLLM step sends
constexpr int kBlockTokens = 16;

// Batches of kEventsPerBatch map-shaped BlockStored events, one block
// each, with distinct hashes and tokens.
std::vector<std::string> Payloads(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    std::vector<FakeEvent> events;
    for (int j = 0; j < kEventsPerBatch; ++j) {
      FakeEvent e;
      const uint64_t h = static_cast<uint64_t>(i) * 131 + j + 1;
      e.hashes = {h};
      e.parent = h + 7;
      e.block_size = kBlockTokens;
      for (int t = 0; t < kBlockTokens; ++t) e.token_ids.push_back(h * 31 + t);
      events.push_back(std::move(e));
    }
    out.push_back(EncodeBatch(events, /*map_shape=*/true, /*bytes=*/true));
  }
  return out;
}

// The child: binds a PUB socket, writes its endpoint to `out`, then obeys
// commands from `in`: "F n" sends n batches at once, "P rate seconds" paces
// batches at rate events/s.
[[noreturn]] void Publisher(int in, int out) {
  zmq::context_t context(1);
  zmq::socket_t pub(context, zmq::socket_type::pub);
  pub.set(zmq::sockopt::sndhwm, 0);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind("tcp://127.0.0.1:*");
  const std::string ep = pub.get(zmq::sockopt::last_endpoint) + "\n";
  (void)!write(out, ep.data(), ep.size());
  const std::vector<std::string> payloads = Payloads(256);
  int64_t seq = 0;
  auto send = [&](const std::string& p) {
    std::vector<zmq::const_buffer> f = {
        zmq::buffer(std::string()),
        zmq::buffer(auditor::kv_events::EncodeSequence(seq++)), zmq::buffer(p)};
    zmq::send_multipart(pub, f);
  };
  FILE* cmds = fdopen(in, "r");
  char cmd = 0;
  double a = 0, b = 0;
  while (std::fscanf(cmds, " %c %lf %lf", &cmd, &a, &b) >= 2) {
    if (cmd == 'F') {
      for (int64_t i = 0; i < static_cast<int64_t>(a); ++i) {
        send(payloads[i % payloads.size()]);
      }
    } else if (cmd == 'P') {
      const double batches_per_s = a / kEventsPerBatch;
      const auto start = Clock::now();
      for (int64_t i = 0; i < static_cast<int64_t>(batches_per_s * b); ++i) {
        std::this_thread::sleep_until(
            start + std::chrono::duration<double>(i / batches_per_s));
        send(payloads[i % payloads.size()]);
      }
    }
  }
  _exit(0);
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Waits until the ledger holds `events` events (or 60 s); false on timeout.
bool WaitEvents(const auditor::kv_events::Ledger& ledger, int64_t events) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (ledger.stats().events < events) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));  // its own CPU stays negligible
  }
  return true;
}

}  // namespace

bool KvEventsBench(int flood_events, double paced_rate, double paced_seconds) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
  const pid_t pid = fork();
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    Publisher(to_child[0], from_child[1]);
  }
  close(to_child[0]);
  close(from_child[1]);
  char buf[256] = {0};
  const ssize_t n = read(from_child[0], buf, sizeof(buf) - 1);
  std::string endpoint(buf, n > 0 ? static_cast<size_t>(n) : 0);
  while (!endpoint.empty() && endpoint.back() == '\n') endpoint.pop_back();
  auditor::kv_events::Ledger ledger;
  auditor::kv_events::SubscriberOptions o;
  o.endpoint = endpoint;
  auditor::kv_events::Subscriber sub(o, &ledger);
  bool ok = sub.Start().ok();
  FILE* cmds = fdopen(to_child[1], "w");
  if (ok) {
    const int batches = flood_events / kEventsPerBatch;
    const auto t0 = Clock::now();
    std::fprintf(cmds, "F %d 0\n", batches);
    std::fflush(cmds);
    ok = WaitEvents(ledger, int64_t{batches} * kEventsPerBatch);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf(
        "| kv events followed, publisher flooding (%d events, %d per batch) "
        "| %.0f k events/s, %lld gaps |\n",
        batches * kEventsPerBatch, kEventsPerBatch,
        batches * kEventsPerBatch / s / 1e3,
        static_cast<long long>(ledger.stats().gaps));
  }
  if (ok) {
    const int64_t before = ledger.stats().events;
    const double cpu0 = CpuSeconds();
    const auto t0 = Clock::now();
    std::fprintf(cmds, "P %f %f\n", paced_rate, paced_seconds);
    std::fflush(cmds);
    const int64_t expect =
        before +
        static_cast<int64_t>(paced_rate / kEventsPerBatch * paced_seconds) *
            kEventsPerBatch;
    ok = WaitEvents(ledger, expect);
    const double wall =
        std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf(
        "| auditor CPU following %.0f events/s for %.0f s | %.2f%% of one "
        "core (%.0f events/s received) |\n",
        paced_rate, paced_seconds, 100 * (CpuSeconds() - cpu0) / wall,
        (ledger.stats().events - before) / wall);
  }
  if (!ok) std::printf("kv events benchmark failed (%s)\n", endpoint.c_str());
  sub.Stop();
  std::fclose(cmds);
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  return ok;
}

}  // namespace kvcanary::bench
