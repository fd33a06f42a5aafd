// The soak's samples of a running `up` (bench/soak.cc): each process's RSS,
// the nodes' used KV pages and watermark violations, and requests/s.
#ifndef KVCANARY_BENCH_SOAK_SAMPLER_H_
#define KVCANARY_BENCH_SOAK_SAMPLER_H_

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvcanary::bench {

struct SamplerOptions {
  std::string prefill_url;  // nodes whose /metrics are read
  std::string decode_url;
  // Either `up`'s pid (its children are found by their --role=, again at
  // every sample, so a restarted child is followed) or the three pids.
  int up_pid = 0;
  int router_pid = 0, prefill_pid = 0, decode_pid = 0;
  int interval_s = 10;
  FILE* progress = nullptr;  // if set, one line per sample as it is taken
};

struct Sample {
  std::string label;          // "start", "10%", "load", "end" or "" (periodic)
  double t_s = 0;             // since the load began
  long done = 0;              // requests finished
  double requests_per_s = 0;  // since the previous sample
  long rss_kib[3] = {-1, -1, -1};  // router, prefill, decode; -1: unknown
  long used_pages[2] = {-1, -1};   // prefill, decode; -1: /metrics unread
  long violations = -1;            // both nodes; -1: /metrics unread
};

// Sum of the series of metric family `name` whose labels contain `label`,
// from a Prometheus text page; -1 if `page` is empty (could not be read), 0
// if the family has no such series (violation counters have none until the
// first violation).
long MetricSum(const std::string& page, const std::string& name,
               const std::string& label);

// GET url/metrics; "" on any failure.
std::string FetchMetrics(const std::string& url);

// Takes a sample every interval, and one labelled "10%" as soon as a tenth
// of `requests` are done (the memory baseline), until Loop's `stop`.
// Thread-safe: Loop runs on its own thread while Add may be called from
// another.
class Sampler {
 public:
  using Clock = std::chrono::steady_clock;

  Sampler(SamplerOptions options, Clock::time_point t0,
          const std::atomic<long>* done, long requests);

  // Returns once `stop` is true, after taking the "10%" sample if it is due.
  void Loop(const std::atomic<bool>& stop);
  void Add(const std::string& label);

  // The samples so far (a copy).
  std::vector<Sample> samples() const;
  // The "10%" sample. REQUIRES: Loop has returned.
  Sample baseline() const;

 private:
  Sample Take(const std::string& label) const;

  const SamplerOptions options_;
  const Clock::time_point t0_;
  const std::atomic<long>* done_;
  const long requests_;
  mutable absl::Mutex mu_;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
  size_t baseline_ ABSL_GUARDED_BY(mu_) = 0;
};

// The samples as a Markdown table, sizes in MiB.
void PrintSamples(const std::vector<Sample>& samples);

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_SOAK_SAMPLER_H_
