// kvcanary-bench-detect: how often each detector catches each bug class,
// how fast, and how often it raises a false alarm on a healthy engine that
// is busy. Campaigns of the real `kvcanary-auditor` (a process each, its
// flags, its JSON report and evidence database) against the real
// `kvcanary-engine up` (one per configuration: healthy quiet, healthy under
// a background load whose rate swings idle -> saturating -> light every few
// seconds, each fault with watermarks off, detect and enforce, and the
// global prefix cache), black-box, with --trace and with --kv-events, a
// number of seeds each (a seed is the campaign's marker key). Prints, per
// configuration and mode: campaigns, the share with any finding (the
// detection rate, or on a healthy configuration the false-alarm rate) with
// its 95% Wilson interval, the inconclusive share, and each detector's
// rate with its median probes and seconds to the first finding; a JSON
// document beside it (--json). docs/detection.md holds the latest table.
// This file: the flags, the tenants, and the run over the matrix, one
// configuration at a time; bench/detect_*.h hold the parts.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/detect_campaign.h"
#include "bench/detect_flags.h"
#include "bench/detect_load.h"
#include "bench/detect_matrix.h"
#include "bench/detect_score.h"
#include "bench/detect_scorecard.h"
#include "bench/detect_up.h"
#include "bench/machine.h"
#include "common/file.h"
#include "common/temp_dir.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(bool, quick, false,
          "A small matrix (healthy quiet and under the swinging load, one "
          "fault, 2 seeds) that finishes within 3 minutes on 2 cores.");
ABSL_FLAG(int, seeds, 10, "Campaigns per configuration and mode.");
ABSL_FLAG(int, healthy_runs, 0,
          "Instead of the matrix: this many black-box campaigns against a "
          "healthy engine under the swinging load, counting those with any "
          "finding.");
ABSL_FLAG(int, duration, 4, "Seconds each campaign probes (--duration).");
ABSL_FLAG(std::string, only, "",
          "Only configurations whose name contains this.");
ABSL_FLAG(std::string, modes, "",
          "Only these modes (comma-separated: blackbox, trace, kv_events, "
          "salts).");
ABSL_FLAG(std::string, json, "", "Write the figures as JSON here.");
ABSL_FLAG(std::string, model, "",
          "Model for the engine (llama2.c .bin); empty: the embedded one.");
ABSL_FLAG(std::string, tokenizer, "", "Tokenizer for --model.");
ABSL_FLAG(std::string, api, "completions",
          "completions: the auditor's --api=completions against the engine's "
          "plain chat rendering; chat: --api=chat against the engine's "
          "--chat-template=kvcanary (a header and role markers).");
ABSL_FLAG(std::string, numerics, "invariant",
          "The engine's --numerics for every configuration: invariant (the "
          "same answer alone and in any batch) or variant (as a healthy GPU "
          "server: answers under load may differ; docs/exactness.md).");
ABSL_FLAG(std::string, bin_dir, "",
          "Where kvcanary-engine and kvcanary-auditor are; empty: this "
          "build's bin/.");
ABSL_FLAG(bool, fail_on_false_alarm, false,
          "Exit 1 if any campaign against a healthy configuration raised a "
          "finding, or any campaign ended in error (the test of --quick).");

namespace kvcanary::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* const kTenants[] = {"acme", "globex", "initech"};

bool WriteTenants(const std::string& dir) {
  json engine = {{"tenants", json::array()}}, auditor = engine;
  for (const char* t : kTenants) {
    json e = {{"id", t}, {"api_keys", {absl::StrCat("sk-", t)}}};
    engine["tenants"].push_back(e);
    // Sent only by cache-audit --salts.
    e["cache_salt"] = absl::StrCat(t, "-salt");
    auditor["tenants"].push_back(e);
  }
  engine["tenants"].push_back(
      {{"id", "loadgen"}, {"api_keys", {"sk-loadgen"}}});
  return WriteFileAtomically(dir + "/engine.json", engine.dump(), 0600).ok() &&
         WriteFileAtomically(dir + "/auditor.json", auditor.dump(), 0600).ok();
}

// A configuration's campaigns: an `up` of its own (and the swinging load
// where it has one), `seeds` campaigns in each of its modes that `modes`
// asks for (all if empty), a scorecard row each. False if `up` did not
// start (printed).
bool RunConfig(const Config& c, const std::string& modes, int seeds,
               const std::string& dir, Scorecard* card) {
  Up up(c, dir);
  if (!up.ok()) {
    std::fprintf(stderr, "kvcanary-engine up did not start for %s\n",
                 c.name.c_str());
    return false;
  }
  std::optional<SwingingLoad> load;
  if (c.swinging_load) load.emplace(up.url("router"));
  for (const std::string& mode : c.modes) {
    if (!modes.empty() && !absl::StrContains(modes, mode)) continue;
    std::vector<Campaign> runs;
    for (int s = 0; s < seeds; ++s)
      runs.push_back(RunCampaign(c, up, mode, s, dir));
    json row = Summarise(c, mode, runs);
    if (load.has_value()) row["load_requests"] = load->requests();
    card->Add(c, mode, std::move(row));
  }
  return true;
}

int Main() {
  // Tenants, campaign databases and results, under $TMPDIR: removed, with
  // all in it, whichever way this returns.
  absl::StatusOr<TempDir> temp = TempDir::Create("kvcanary-bench-detect");
  if (!temp.ok() || !WriteTenants(temp->path())) {
    std::fprintf(stderr, "kvcanary-bench-detect: cannot write a temp dir\n");
    return 2;
  }
  const std::string dir = temp->path();
  PrintMachine();
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int healthy_runs = absl::GetFlag(FLAGS_healthy_runs);
  std::vector<Config> matrix;
  int seeds = quick ? std::min(absl::GetFlag(FLAGS_seeds), 2)
                    : absl::GetFlag(FLAGS_seeds);
  if (healthy_runs > 0) {
    matrix.push_back({"healthy_swinging", {}, true, true, {"blackbox"}});
    seeds = healthy_runs;
  } else {
    matrix = Matrix(quick);
  }
  std::printf(
      "campaigns: kvcanary-auditor probe --duration=%d (mode salts: "
      "cache-audit --salts), %d seeds per row, --api=%s; engine: %s, "
      "--numerics=%s\n\n",
      absl::GetFlag(FLAGS_duration), seeds, absl::GetFlag(FLAGS_api).c_str(),
      absl::GetFlag(FLAGS_model).empty() ? "embedded model"
                                         : absl::GetFlag(FLAGS_model).c_str(),
      absl::GetFlag(FLAGS_numerics).c_str());
  Scorecard card;
  card.PrintHeader();
  const std::string only = absl::GetFlag(FLAGS_only);
  const std::string modes = absl::GetFlag(FLAGS_modes);
  const auto t0 = Clock::now();
  for (const Config& c : matrix) {
    if (!only.empty() && c.name.find(only) == std::string::npos) continue;
    // A configuration none of whose modes is asked for starts no engine.
    if (std::none_of(c.modes.begin(), c.modes.end(), [&](const auto& m) {
          return modes.empty() || absl::StrContains(modes, m);
        })) {
      continue;
    }
    if (!RunConfig(c, modes, seeds, dir, &card)) return 2;
  }
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - t0).count();
  card.PrintTotals(elapsed);
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    const json doc =
        card.Document(absl::GetFlag(FLAGS_duration), seeds, elapsed);
    if (!WriteFileAtomically(json_path, doc.dump(2), 0644).ok()) {
      std::fprintf(stderr, "kvcanary-bench-detect: cannot write %s\n",
                   json_path.c_str());
      return 2;
    }
  }
  const bool fail = absl::GetFlag(FLAGS_fail_on_false_alarm) &&
                    (card.false_alarms() > 0 || card.errors() > 0);
  return fail ? 1 : 0;
}

}  // namespace
}  // namespace kvcanary::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Detection power: campaigns against `kvcanary-engine up` for a matrix "
      "of configurations; rates with 95% Wilson intervals.");
  absl::ParseCommandLine(argc, argv);
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api != "completions" && api != "chat") {
    std::fprintf(stderr,
                 "kvcanary-bench-detect: --api=%s: want completions "
                 "or chat\n",
                 api.c_str());
    return 2;
  }
  return kvcanary::bench::Main();
}
