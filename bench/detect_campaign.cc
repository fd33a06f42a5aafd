// A campaign of kvcanary-bench-detect: the auditor's arguments for each
// mode, its run, and the first finding of each detector read back from
// its evidence database (`kvcanary-auditor findings --rows`).
#include "bench/detect_campaign.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/detect_flags.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/random.h"
#include "nlohmann/json.hpp"

namespace kvcanary::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::optional<json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// The auditor's arguments for one campaign of `mode`.
std::vector<std::string> CampaignArgs(const Config& c, const Up& up,
                                      const std::string& mode, int seed,
                                      const std::string& dir,
                                      const std::string& tag) {
  if (mode == "salts") {
    std::vector<std::string> args = {"cache-audit",
                                     "--salts",
                                     "--target=" + up.url("router"),
                                     "--tenants=" + dir + "/auditor.json",
                                     "--db=" + tag + ".db",
                                     "--json=" + tag + ".json",
                                     absl::StrCat("--seed=", seed + 1),
                                     "--api=" + absl::GetFlag(FLAGS_api)};
    if (c.evict_tokens > 0) {
      args.push_back(absl::StrCat("--evict-tokens=", c.evict_tokens));
    }
    return args;
  }
  const std::string key = tag + ".key";
  (void)WriteFileAtomically(
      key, absl::StrCat("bench-seed-", seed, "-key-0123456789"), 0600);
  std::vector<std::string> args = {
      "probe",
      "--target=" + up.url("router"),
      "--tenants=" + dir + "/auditor.json",
      "--db=" + tag + ".db",
      "--json=" + tag + ".json",
      "--key-file=" + key,
      "--api=" + absl::GetFlag(FLAGS_api),
      absl::StrCat("--duration=", absl::GetFlag(FLAGS_duration)),
      "--quiet"};
  if (mode == "trace") {
    args.push_back("--trace=" + up.url("prefill") + "," + up.url("decode"));
    args.push_back("--trace-token-file=" + up.url("trace-token-file"));
  }
  if (mode == "kv_events") {
    // The stream's login is the trace token (docs/nodes.md).
    args.push_back("--kv-events=" + up.url("kv-events"));
    args.push_back("--trace-token-file=" + up.url("trace-token-file"));
  }
  return args;
}

}  // namespace

Campaign RunCampaign(const Config& config, const Up& up,
                     const std::string& mode, int seed,
                     const std::string& dir) {
  const std::string tag = absl::StrCat(dir, "/c", seed, "-", RandomHex(4));
  const std::vector<std::string> args =
      CampaignArgs(config, up, mode, seed, dir, tag);
  const int64_t started = NowUs();
  const auto t0 = Clock::now();
  const std::string auditor = BinDir() + "/kvcanary-auditor";
  Wait(Spawn(auditor, args, false).pid);
  Campaign c;
  c.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto doc = ReadJson(tag + ".json");
  c.verdict = doc.has_value() ? doc->value("verdict", "error") : "error";
  // The finding rows: the first of each detector, by probe and time.
  Child f = Spawn(
      auditor, {"findings", "--db=" + tag + ".db", "--rows", "--format=json"},
      true);
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(f.out, buf, sizeof(buf))) > 0) out.append(buf, n);
  close(f.out);
  Wait(f.pid);
  const json rows = json::parse(out, nullptr, false);
  if (rows.is_array()) {
    for (const json& r : rows) {
      const std::string d = r.value("detector", "");
      // A finding on one answer names its probe; a judgement over many
      // (latency's pairs) came at the last of them; one over a stream
      // (trace, kv_events) names none.
      const json& detail = r.value("detail", json::object());
      int64_t probe = -1;
      if (detail.contains("probe") && detail["probe"].is_number_integer()) {
        probe = detail["probe"].get<int64_t>();
      }
      if (detail.contains("probes") && detail["probes"].is_array()) {
        for (const json& p : detail["probes"]) {
          if (p.is_number_integer()) probe = std::max(probe, p.get<int64_t>());
        }
      }
      const double s = (r.value("ts_us", int64_t{0}) - started) / 1e6;
      auto it = c.first.find(d);
      if (it == c.first.end()) {
        c.first[d] = {probe, s};
      } else {
        if (probe >= 0 && (it->second.first < 0 || probe < it->second.first)) {
          it->second.first = probe;
        }
        it->second.second = std::min(it->second.second, s);
      }
    }
  }
  for (const char* ext : {".db", ".json", ".key", ".db-wal", ".db-shm"}) {
    unlink((tag + ext).c_str());
  }
  return c;
}

}  // namespace kvcanary::bench
