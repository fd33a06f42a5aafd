// What the KV transfer figures of kvcanary-bench-serving move and measure
// (bench/kv_transfer_bench.h): the 260K model's KV geometry, a Plan of
// page frames per transfer, and a Figure of K/V delivered, its time, its
// CPU and the problems that void it.
#ifndef KVCANARY_BENCH_KV_TRANSFER_PLAN_H_
#define KVCANARY_BENCH_KV_TRANSFER_PLAN_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/transfer/kv_receiver.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine::bench {

using Clock = std::chrono::steady_clock;
// Seconds on the steady clock since `since`.
double Seconds(Clock::time_point since);

// The 260K model's KV geometry: 4 KB of K/V per full page of one layer.
KvGeometry Geometry();

// What the benchmark moves: `transfers` transfers of `prompt_pages` full
// pages in every layer.
struct Plan {
  int transfers = 0;
  int prompt_pages = 0;
  std::vector<kv::Page> pages;  // one transfer's, stamped per transfer
  uint64_t kv_bytes = 0;        // K/V bytes of all transfers
  std::string stream;           // one transfer's page frames, encoded
};

// About `transfer_mb` MiB of page frames (at least one transfer), in
// transfers of `pages_per_transfer` frames (whole prompt pages of every
// layer, at least one).
Plan MakePlan(int transfer_mb, int pages_per_transfer);

// A figure in MB/s of K/V delivered, or the problems that void it.
struct Figure {
  uint64_t kv_bytes = 0;  // delivered
  double seconds = 0;
  std::vector<std::string> problems;
  // CPU time (user and system) of the sending thread and of the decode
  // side's session threads, waits that poll included.
  double sender_cpu = 0;
  double receiver_cpu = 0;

  double mb_per_s() const { return seconds > 0 ? kv_bytes / 1e6 / seconds : 0; }
  // CPU seconds per GB of K/V delivered.
  double sender_s_per_gb() const { return sender_cpu / (kv_bytes / 1e9); }
  double receiver_s_per_gb() const { return receiver_cpu / (kv_bytes / 1e9); }
};

}  // namespace kvcanary::engine::bench

#endif  // KVCANARY_BENCH_KV_TRANSFER_PLAN_H_
