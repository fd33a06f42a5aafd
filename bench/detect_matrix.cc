// The matrix of kvcanary-bench-detect: which `up` configurations, with
// which flags and campaign modes, and which of them are healthy.
#include "bench/detect_matrix.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/faults.h"

namespace kvcanary::bench {
namespace {

// The salt configurations (mode `salts`: `cache-audit --salts` campaigns;
// docs/cache-audit.md): scoped salts (healthy), client salts (forgeable),
// and a 40-page pool (640 tokens) over a host tier, healthy and with the
// tier-drops-salt fault, each prime pushed out of the pool before probes.
// A 500-token limit, as the engine tests have: a ~370-token prefix, whose
// hit is plain enough to vouch for isolation within the samples.
void AddSaltConfigs(std::vector<Config>* m) {
  const std::string limit = "--max-prompt-tokens=500";
  m->push_back(
      {"salts/scoped", {"--cache-salt=scoped", limit}, true, false, {"salts"}});
  m->push_back({"salts/client",
                {"--cache-salt=client", "--watermark=detect", limit},
                false,
                false,
                {"salts"}});
  const std::vector<std::string> tier = {"--cache-salt=scoped",
                                         "--watermark=detect", "--num_pages=40",
                                         "--host_tier_pages=512", limit};
  m->push_back({"salts/host-tier", tier, true, false, {"salts"}, 640});
  std::vector<std::string> fault = tier;
  fault.push_back("--fault=tier-drops-salt");
  m->push_back({"salts/tier-drops-salt", fault, false, false, {"salts"}, 640});
}

}  // namespace

std::vector<Config> Matrix(bool quick) {
  std::vector<Config> m;
  if (quick) {
    m.push_back({"healthy_quiet", {}, true, false, {"blackbox"}});
    m.push_back({"healthy_swinging", {}, true, true, {"blackbox", "trace"}});
    m.push_back(
        {"admission-abort-lost/off",
         {"--fault=admission-abort-lost", "--watermark=off", "--num_pages=64"},
         false,
         false,
         {"blackbox"}});
    return m;
  }
  m.push_back(
      {"healthy_quiet", {}, true, false, {"blackbox", "trace", "kv_events"}});
  m.push_back(
      {"healthy_swinging", {}, true, true, {"blackbox", "trace", "kv_events"}});
  m.push_back({"prefix-cache-global",
               {"--prefix-cache=global"},
               false,
               false,
               {"blackbox", "trace", "kv_events"}});
  for (const engine::FaultInfo& f : engine::AllFaults()) {
    for (const char* wm : {"off", "detect", "enforce"}) {
      Config c;
      c.name = absl::StrCat(f.name, "/", wm);
      c.flags = {absl::StrCat("--fault=", f.name),
                 absl::StrCat("--watermark=", wm)};
      // A small pool, so freed pages come round again within a campaign;
      // but not where the bug needs many transfers in flight at once (the
      // pool, not the slots, would then bound them), nor where what it
      // exposes is a cached page that must outlive the load until its
      // prefix comes again (a small pool evicts it first).
      if (f.fault != engine::Fault::kMetadataSlotReuse &&
          f.fault != engine::Fault::kAbortCacheInsert) {
        c.flags.push_back("--num_pages=64");
      }
      // The tier the fault keys without the salt; the small pool spills.
      if (f.fault == engine::Fault::kTierDropsSalt) {
        c.flags.push_back("--host_tier_pages=256");
      }
      c.modes = {"blackbox", "trace"};
      m.push_back(c);
      // On loopback a stories260K prompt's K/V crosses in about 0.1 ms,
      // where no hang-up lands; between hosts over TCP it takes about as
      // long as the prefill: the same fault over a 20 MB/s link.
      if (f.fault == engine::Fault::kAbortTransferRace) {
        c.name += "/link_20MBps";
        c.flags.push_back("--test_kv_receive_bytes_per_s=20000000");
        m.push_back(c);
      }
      // The reuse faults under the other hand-out order (--free-list):
      // the least recently freed page first, so a freed page comes round
      // again only after every other free one.
      if (std::string(wm) == "detect" &&
          (f.fault == engine::Fault::kNoScrubReuse ||
           f.fault == engine::Fault::kAbortTransferRace ||
           f.fault == engine::Fault::kAbortCacheInsert)) {
        c.name += "/fifo";
        c.flags.push_back("--free_list=fifo");
        m.push_back(std::move(c));
      }
    }
  }
  AddSaltConfigs(&m);
  return m;
}

}  // namespace kvcanary::bench
