#include "bench/soak_sampler.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/text_table.h"
#include "httplib.h"

namespace kvcanary::bench {
namespace {

struct Pids {
  int router = 0, prefill = 0, decode = 0;
};

// VmRSS of /proc/PID/status; -1 if the process is gone.
long ReadRssKib(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  long kib = -1;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "VmRSS:")) continue;
    absl::string_view value = absl::StripSuffix(line.substr(6), "kB");
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), &kib)) kib = -1;
  }
  return kib;
}

Pids CurrentPids(const SamplerOptions& o) {
  Pids pids{o.router_pid, o.prefill_pid, o.decode_pid};
  if (o.up_pid == 0) return pids;
  std::ifstream children(
      absl::StrCat("/proc/", o.up_pid, "/task/", o.up_pid, "/children"));
  int child;
  while (children >> child) {
    std::ifstream in(absl::StrCat("/proc/", child, "/cmdline"));
    const std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    if (absl::StrContains(cmdline, "--role=router")) pids.router = child;
    if (absl::StrContains(cmdline, "--role=prefill")) pids.prefill = child;
    if (absl::StrContains(cmdline, "--role=decode")) pids.decode = child;
  }
  return pids;
}

}  // namespace

long MetricSum(const std::string& page, const std::string& name,
               const std::string& label) {
  if (page.empty()) return -1;
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (!absl::StartsWith(line, name + "{") || !absl::StrContains(line, label))
      continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return static_cast<long>(sum);
}

std::string FetchMetrics(const std::string& url) {
  httplib::Client c(url);
  c.set_read_timeout(10, 0);
  auto res = c.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
}

Sampler::Sampler(SamplerOptions options, Clock::time_point t0,
                 const std::atomic<long>* done, long requests)
    : options_(std::move(options)), t0_(t0), done_(done), requests_(requests) {}

void Sampler::Loop(const std::atomic<bool>& stop) {
  const auto interval = std::chrono::seconds(options_.interval_s);
  auto next = t0_ + interval;
  bool baseline = false;
  for (;;) {
    // `stop` is read before `done_`: when it is set every request is done.
    const bool last = stop;
    if (!baseline && *done_ * 10 >= requests_) {
      baseline = true;
      Add("10%");
    }
    if (last) return;
    if (Clock::now() >= next) {
      next += interval;
      Add("");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Sampler::Add(const std::string& label) {
  Sample s = Take(label);
  absl::MutexLock lock(&mu_);
  if (!samples_.empty() && s.t_s > samples_.back().t_s)
    s.requests_per_s =
        (s.done - samples_.back().done) / (s.t_s - samples_.back().t_s);
  if (label == "10%") baseline_ = samples_.size();
  if (options_.progress != nullptr) {
    std::fprintf(options_.progress,
                 "soak: %6.1f s %-5s %8ld done %7.1f req/s  RSS MiB router "
                 "%.1f prefill %.1f decode %.1f  used pages %ld/%ld  "
                 "violations %ld\n",
                 s.t_s, s.label.c_str(), s.done, s.requests_per_s,
                 s.rss_kib[0] / 1024.0, s.rss_kib[1] / 1024.0,
                 s.rss_kib[2] / 1024.0, s.used_pages[0], s.used_pages[1],
                 s.violations);
  }
  samples_.push_back(std::move(s));
}

std::vector<Sample> Sampler::samples() const {
  absl::MutexLock lock(&mu_);
  return samples_;
}

Sample Sampler::baseline() const {
  absl::MutexLock lock(&mu_);
  CHECK_LT(baseline_, samples_.size());
  return samples_[baseline_];
}

Sample Sampler::Take(const std::string& label) const {
  Sample s;
  s.label = label;
  s.t_s = std::chrono::duration<double>(Clock::now() - t0_).count();
  s.done = *done_;
  const Pids pids = CurrentPids(options_);
  s.rss_kib[0] = ReadRssKib(pids.router);
  s.rss_kib[1] = ReadRssKib(pids.prefill);
  s.rss_kib[2] = ReadRssKib(pids.decode);
  s.violations = 0;
  const std::string nodes[2] = {options_.prefill_url, options_.decode_url};
  for (int n = 0; n < 2; ++n) {
    const std::string page = FetchMetrics(nodes[n]);
    s.used_pages[n] =
        MetricSum(page, "kvcanary_node_kv_pages", "state=\"used\"");
    const long v =
        MetricSum(page, "kvcanary_node_watermark_violations_total", "kind=");
    s.violations = (v < 0 || s.violations < 0) ? -1 : s.violations + v;
  }
  return s;
}

void PrintSamples(const std::vector<Sample>& samples) {
  constexpr TextTable::Align kRight = TextTable::kRight;
  TextTable table({{"sample"},
                   {"t (s)", kRight},
                   {"done", kRight},
                   {"req/s", kRight},
                   {"router MiB", kRight},
                   {"prefill MiB", kRight},
                   {"decode MiB", kRight},
                   {"prefill used pages", kRight},
                   {"decode used pages", kRight},
                   {"violations", kRight}},
                  TextTable::Markdown());
  const auto mib = [](long kib) {
    return absl::StrFormat("%.1f", kib / 1024.0);
  };
  for (const Sample& s : samples) {
    table.AddRow({s.label, absl::StrFormat("%.1f", s.t_s), absl::StrCat(s.done),
                  absl::StrFormat("%.1f", s.requests_per_s), mib(s.rss_kib[0]),
                  mib(s.rss_kib[1]), mib(s.rss_kib[2]),
                  absl::StrCat(s.used_pages[0]), absl::StrCat(s.used_pages[1]),
                  absl::StrCat(s.violations)});
  }
  std::printf("\n%s", table.ToString().c_str());
}

}  // namespace kvcanary::bench
