// The KV transfer table of kvcanary-bench-serving: the rounds of framed,
// raw, TLS and per-byte figures (bench/kv_transfer_framed.h,
// bench/kv_transfer_baselines.h), their medians, and the thresholds of
// issues 13 and 25 they are printed against.
#include "bench/kv_transfer_bench.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/kv_transfer_baselines.h"
#include "bench/kv_transfer_framed.h"
#include "bench/kv_transfer_plan.h"
#include "common/crc32c.h"
#include "common/text_table.h"
#include "common/tls.h"

namespace kvcanary::engine::bench {
namespace {

// The thresholds of issue 13, item 1 (transfer token on, TLS off).
constexpr double kFramedThresholdMBps = 1400;
constexpr double kRatioThreshold = 0.9;
// Issue 25, item 8: framed over mutual TLS against the lower of framed
// plain and one core's AES-128-GCM, measured in the same round.
constexpr double kTlsRatioThreshold = 0.8;
// A 512-token prompt of stories260K: 32 pages in each of its 5 layers.
constexpr int kSmallTransferPages = 160;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

bool ReportProblems(const char* figure, const Figure& f) {
  for (const std::string& p : f.problems) {
    std::fprintf(stderr, "kv transfer (%s): %s\n", figure, p.c_str());
  }
  return f.problems.empty();
}

// Each figure's rounds, in MB/s; the ratios', round by round.
struct Results {
  std::vector<double> framed, raw, raw_polled, small, ratio, ratio_polled;
  // Over mutual TLS with sessions kept, one core's AES-128-GCM, and the
  // TLS figure against the lower of framed plain and AES.
  std::vector<double> tls, aes, ratio_tls;
  // CPU seconds per GB on each side: framed plain, then mutual TLS.
  std::vector<double> plain_send_cpu, plain_recv_cpu, tls_send_cpu,
      tls_recv_cpu;
  double tls_fresh = 0;  // over mutual TLS, a handshake per transfer
  double crc_gbps = 0;
};

void PrintTable(const Plan& plan, const Plan& small, const Results& r) {
  std::printf("\n## KV transfer on loopback\n\n");
  std::printf(
      "Page frames of %zu bytes (the 260K model's geometry: 4 KB of K/V), "
      "%.0f MB of K/V per figure and round; the median of %zu rounds, each "
      "framed then raw (both readers)\n\n",
      plan.stream.size() / plan.pages.size(), plan.kv_bytes / 1e6,
      r.ratio.size());
  TextTable table({{"figure"},
                   {"value", TextTable::kRight},
                   {"threshold", TextTable::kRight}},
                  TextTable::Markdown());
  const auto row = [&table](std::string name, std::string value,
                            std::string threshold) {
    table.AddRow({std::move(name), std::move(value), std::move(threshold)});
  };
  const auto mbps = [](double v) { return absl::StrFormat("%.0f MB/s", v); };
  row(absl::StrCat("framed, CRC32C per page, transfers of ", plan.pages.size(),
                   " frames"),
      mbps(Median(r.framed)),
      absl::StrFormat(">= %.0f MB/s", kFramedThresholdMBps));
  row("raw TCP: the same bytes in one unframed bulk send", mbps(Median(r.raw)),
      "");
  row("raw TCP, reads polling before they sleep (as the KV sockets)",
      mbps(Median(r.raw_polled)), "");
  const std::string ratio_threshold =
      absl::StrFormat(">= %.2f", kRatioThreshold);
  row("framed / raw, round by round", absl::StrFormat("%.3f", Median(r.ratio)),
      ratio_threshold);
  row("framed / raw with polling reads, round by round",
      absl::StrFormat("%.3f", Median(r.ratio_polled)), ratio_threshold);
  row(absl::StrCat("framed, transfers of ", small.pages.size(),
                   " frames (a 512-token 260K prompt)"),
      mbps(Median(r.small)), "");
  const double bound = std::min(Median(r.framed), Median(r.aes));
  row("framed over mutual TLS, sessions kept between transfers",
      mbps(Median(r.tls)),
      absl::StrFormat(">= %.0f MB/s", kTlsRatioThreshold * bound));
  row("AES-128-GCM, one core (EVP, 16 KiB records), same bytes",
      mbps(Median(r.aes)), "");
  row("mutual TLS / min(framed, AES-128-GCM), round by round",
      absl::StrFormat("%.3f", Median(r.ratio_tls)),
      absl::StrFormat(">= %.2f", kTlsRatioThreshold));
  row("framed over mutual TLS, a handshake per transfer", mbps(r.tls_fresh),
      "");
  const auto cpu = [](const std::vector<double>& send,
                      const std::vector<double>& recv) {
    return absl::StrFormat("%.2f / %.2f s", Median(send), Median(recv));
  };
  row("CPU per GB, sender / receiver side: framed plain",
      cpu(r.plain_send_cpu, r.plain_recv_cpu), "");
  row("CPU per GB, sender / receiver side: framed over mutual TLS",
      cpu(r.tls_send_cpu, r.tls_recv_cpu), "");
  row(Crc32cUsesIsal() ? "CRC32C alone, same bytes (ISA-L)"
                       : "CRC32C alone, same bytes (CRC32 instruction)",
      absl::StrFormat("%.2f GB/s", r.crc_gbps), "");
  std::printf("%s", table.ToString().c_str());
}

}  // namespace

bool TransferFigures(const TransferBenchOptions& options) {
  Plan plan = MakePlan(options.transfer_mb, options.pages_per_transfer);
  Plan small = MakePlan(options.transfer_mb, kSmallTransferPages);
  Results r;
  const std::shared_ptr<const tls::Context> ctx = BenchTls();
  if (ctx == nullptr) {
    std::fprintf(stderr, "kv transfer: no TLS context for the bench\n");
    return false;
  }
  // Framed then raw in each round, so that a busy moment of the machine
  // falls on one round, not on one figure; the first failure ends the run.
  for (int round = 0; round < options.rounds; ++round) {
    const Figure framed = FramedFigure(plan, nullptr, /*sessions=*/true);
    if (!ReportProblems("framed", framed)) return false;
    const Figure raw = RawFigure(plan, /*poll_first=*/false);
    if (!ReportProblems("raw", raw)) return false;
    const Figure raw_polled = RawFigure(plan, /*poll_first=*/true);
    if (!ReportProblems("raw, polling reads", raw_polled)) return false;
    const Figure small_framed = FramedFigure(small, nullptr, /*sessions=*/true);
    if (!ReportProblems("framed, small transfers", small_framed)) return false;
    r.framed.push_back(framed.mb_per_s());
    r.raw.push_back(raw.mb_per_s());
    r.raw_polled.push_back(raw_polled.mb_per_s());
    r.ratio.push_back(framed.mb_per_s() / raw.mb_per_s());
    r.ratio_polled.push_back(framed.mb_per_s() / raw_polled.mb_per_s());
    r.small.push_back(small_framed.mb_per_s());
    const Figure tls = FramedFigure(plan, ctx.get(), /*sessions=*/true);
    if (!ReportProblems("framed over mutual TLS", tls)) return false;
    const double aes = AesGcmMBps(plan);
    r.plain_send_cpu.push_back(framed.sender_s_per_gb());
    r.plain_recv_cpu.push_back(framed.receiver_s_per_gb());
    r.tls_send_cpu.push_back(tls.sender_s_per_gb());
    r.tls_recv_cpu.push_back(tls.receiver_s_per_gb());
    r.tls.push_back(tls.mb_per_s());
    r.aes.push_back(aes);
    r.ratio_tls.push_back(tls.mb_per_s() / std::min(framed.mb_per_s(), aes));
  }
  const Figure fresh = FramedFigure(plan, ctx.get(), /*sessions=*/false);
  if (!ReportProblems("framed over mutual TLS, fresh connections", fresh)) {
    return false;
  }
  r.tls_fresh = fresh.mb_per_s();
  r.crc_gbps = CrcGBps(plan);
  PrintTable(plan, small, r);
  return true;
}

}  // namespace kvcanary::engine::bench
