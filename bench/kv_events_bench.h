// The KV-cache event subscriber's cost (issue 14): events per second it
// follows from a publisher flooding it on loopback, and its CPU share while
// following a stream of 10,000 events/s. The publisher runs in a child
// process, so the figures are the subscriber's alone.
#ifndef KVCANARY_BENCH_KV_EVENTS_BENCH_H_
#define KVCANARY_BENCH_KV_EVENTS_BENCH_H_

namespace kvcanary::bench {

// Prints its rows of the auditor benchmark's table; false on a failure
// (printed), which ends the benchmark with exit status 1.
bool KvEventsBench(int flood_events, double paced_rate, double paced_seconds);

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_KV_EVENTS_BENCH_H_
