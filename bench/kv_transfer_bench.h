// The KV transfer figures of kvcanary-bench-serving (docs/kv-transfer.md,
// "Throughput"): whole transfers through KvSender and KvReceiver on
// loopback, against raw TCP carrying the same bytes in the same run.
#ifndef KVCANARY_BENCH_KV_TRANSFER_BENCH_H_
#define KVCANARY_BENCH_KV_TRANSFER_BENCH_H_

#include <string>

namespace kvcanary::engine::bench {

struct TransferBenchOptions {
  int transfer_mb = 256;  // MiB of page frames per figure and round
  // Page frames per transfer (prompt pages x 5 layers of the 260K model):
  // 2.7 MB, about what a 256-token prompt of the 15M model ships, in the
  // 260K model's small frames.
  int pages_per_transfer = 640;
  int rounds = 5;  // each framed then raw; medians are printed
};

// Prints the transfer table with its thresholds. False (after printing
// why) when any transfer failed or delivered less than was sent: the
// figures of a failed run are not printed.
bool TransferFigures(const TransferBenchOptions& options);

}  // namespace kvcanary::engine::bench

#endif  // KVCANARY_BENCH_KV_TRANSFER_BENCH_H_
