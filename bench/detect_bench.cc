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
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/machine.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/random.h"
#include "common/stats.h"
#include "common/text_table.h"
#include "engine/core/faults.h"
#include "httplib.h"
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
ABSL_FLAG(bool, fail_on_false_alarm, false,
          "Exit 1 if any campaign against a healthy configuration raised a "
          "finding, or any campaign ended in error (the test of --quick).");

namespace kvcanary::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* const kTenants[] = {"acme", "globex", "initech"};

// One engine configuration of the matrix.
struct Config {
  std::string name;
  std::vector<std::string> flags;  // for `up`
  bool healthy = false;            // any finding is a false alarm
  bool swinging_load = false;
  std::vector<std::string> modes;  // blackbox, trace, kv_events, salts
  // salts: cache-audit --evict-tokens (the pool's size in tokens where a
  // host tier is on); 0 none.
  int evict_tokens = 0;
};

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

std::string BinDir() { return KVCANARY_BIN_DIR; }

// A child process; stdout to a pipe (`read_lines`) or to /dev/null.
struct Child {
  pid_t pid = -1;
  int out = -1;
};

Child Spawn(const std::string& bin, const std::vector<std::string>& args,
            bool pipe_out) {
  int fds[2] = {-1, -1};
  if (pipe_out && pipe(fds) != 0) return {};
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    const int null = open("/dev/null", O_WRONLY);
    dup2(pipe_out ? fds[1] : null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const std::string& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  if (pipe_out) {
    close(fds[1]);
    c.out = fds[0];
  }
  return c;
}

std::string ReadLine(int fd) {
  std::string line;
  char ch;
  while (read(fd, &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  return line;
}

int Wait(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// `kvcanary-engine up` with a configuration's flags.
class Up {
 public:
  Up(const Config& c, const std::string& dir) {
    std::vector<std::string> args = {"up", "--port=0",
                                     "--tenants=" + dir + "/engine.json",
                                     "--max_waiting=1024"};
    const std::string model = absl::GetFlag(FLAGS_model);
    if (!model.empty()) {
      args.push_back("--model=" + model);
      args.push_back("--tokenizer=" + absl::GetFlag(FLAGS_tokenizer));
    }
    bool kv_events = false;
    for (const std::string& m : c.modes) kv_events |= m == "kv_events";
    if (kv_events) args.push_back("--kv-events=tcp://127.0.0.1:0");
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    child_ = Spawn(BinDir() + "/kvcanary-engine", args, true);
    if (child_.pid < 0) return;
    // router, prefill, decode, trace-token-file, then kv-events if asked.
    for (int i = 0; i < 4 + (kv_events ? 1 : 0); ++i) {
      const std::string line = ReadLine(child_.out);
      const size_t a = line.find(' ');
      if (a == std::string::npos) return;
      const size_t b = line.find(' ', a + 1);
      const std::string value = line.substr(
          a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
      urls_[line.substr(0, a)] = value;
    }
  }
  ~Up() {
    if (child_.pid > 0) {
      kill(child_.pid, SIGTERM);
      Wait(child_.pid);
    }
    if (child_.out >= 0) close(child_.out);
  }
  bool ok() const { return urls_.count("trace-token-file") > 0; }
  std::string url(const std::string& role) const {
    auto it = urls_.find(role);
    return it == urls_.end() ? "" : it->second;
  }

 private:
  Child child_;
  std::map<std::string, std::string> urls_;
};

// Eight clients of a tenant of its own whose rate swings every 4 s: idle,
// then all eight back to back (saturating), then one with pauses (light).
class SwingingLoad {
 public:
  explicit SwingingLoad(const std::string& router) {
    for (int i = 0; i < 8; ++i) {
      threads_.emplace_back([this, router, i] { Client(router, i); });
    }
  }
  ~SwingingLoad() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }
  int64_t requests() const { return requests_; }

 private:
  void Client(const std::string& router, int i) {
    httplib::Client client(router);
    client.set_read_timeout(30, 0);
    const httplib::Headers h = {{"Authorization", "Bearer sk-loadgen"}};
    const auto start = Clock::now();
    while (!stop_) {
      const double t =
          std::chrono::duration<double>(Clock::now() - start).count();
      const int phase = static_cast<int>(t / 4) % 3;  // idle, saturating, light
      if (phase == 0 || (phase == 2 && i > 0)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      json j;
      std::string prompt = absl::StrCat("load ", i, " ", RandomHex(4));
      for (int w = 0; w < 60; ++w) prompt += w % 2 ? " dog" : " ran";
      j["prompt"] = prompt;
      j["max_tokens"] = 24;
      j["temperature"] = 0;
      client.Post("/v1/completions", h, j.dump(), "application/json");
      ++requests_;
      if (phase == 2)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> requests_{0};
  std::vector<std::thread> threads_;
};

// One campaign's outcome.
struct Campaign {
  std::string verdict;  // clean, findings, inconclusive, error
  double seconds = 0;
  // detector -> (probes to its first finding, seconds to it)
  std::map<std::string, std::pair<int64_t, double>> first;
};

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
                                     absl::StrCat("--seed=", seed + 1)};
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

template <typename T>
T Median(std::vector<T> v) {
  if (v.empty()) return T{};
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string Rate(int k, int n) {
  const auto [lo, hi] = Wilson95(k, n);
  return absl::StrFormat("%d/%d [%.2f, %.2f]", k, n, lo, hi);
}

// A configuration × mode's campaigns, summarised.
json Summarise(const Config& c, const std::string& mode,
               const std::vector<Campaign>& runs) {
  int any = 0, inconclusive = 0, errors = 0;
  std::map<std::string, std::vector<int64_t>> probes;
  std::map<std::string, std::vector<double>> seconds;
  std::map<std::string, int> caught;
  for (const Campaign& r : runs) {
    any += !r.first.empty();
    inconclusive += r.verdict == "inconclusive";
    errors += r.verdict == "error";
    for (const auto& [d, first] : r.first) {
      ++caught[d];
      if (first.first >= 0) probes[d].push_back(first.first);
      seconds[d].push_back(first.second);
    }
  }
  const int n = static_cast<int>(runs.size());
  json detectors = json::object();
  for (const auto& [d, k] : caught) {
    const auto [lo, hi] = Wilson95(k, n);
    detectors[d] = {
        {"campaigns_with_finding", k},
        {"rate", static_cast<double>(k) / n},
        {"wilson95", {lo, hi}},
        {"median_probes_to_first",
         probes[d].empty() ? json(nullptr) : json(Median(probes[d]))},
        {"median_seconds_to_first", Median(seconds[d])}};
  }
  const auto [lo, hi] = Wilson95(any, n);
  return {{"config", c.name},
          {"mode", mode},
          {"healthy", c.healthy},
          {"swinging_load", c.swinging_load},
          {"campaigns", n},
          {"with_any_finding", any},
          {"any_rate", n ? static_cast<double>(any) / n : 0},
          {"any_wilson95", {lo, hi}},
          {"inconclusive", inconclusive},
          {"errors", errors},
          {"detectors", detectors}};
}

std::string DetectorCell(const json& s) {
  std::vector<std::string> parts;
  const int n = s["campaigns"];
  for (const auto& [d, v] : s["detectors"].items()) {
    // A judgement over a stream (trace, kv_events) names no probe.
    const json& probes = v["median_probes_to_first"];
    parts.push_back(absl::StrFormat(
        "%s %d/%d (%s, %.1f s)", d, v["campaigns_with_finding"].get<int>(), n,
        probes.is_number() ? absl::StrCat(probes.get<int64_t>(), " probes")
                           : std::string("no probe named"),
        v["median_seconds_to_first"].get<double>()));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, "; ");
}

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

int Main() {
  char tmpl[] = "/tmp/kvcanary-bench-detect-XXXXXX";
  const char* d = mkdtemp(tmpl);
  if (d == nullptr || !WriteTenants(d)) {
    std::fprintf(stderr, "kvcanary-bench-detect: cannot write a temp dir\n");
    return 2;
  }
  const std::string dir = d;
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
      "cache-audit --salts), %d seeds per row; engine: %s\n\n",
      absl::GetFlag(FLAGS_duration), seeds,
      absl::GetFlag(FLAGS_model).empty() ? "embedded model"
                                         : absl::GetFlag(FLAGS_model).c_str());
  const TextTable table(
      {{"configuration", TextTable::kLeft, 30},
       {"mode", TextTable::kLeft, 9},
       {"any finding [95%]", TextTable::kRight, 20},
       {"inconcl.", TextTable::kRight, 8},
       {"errors", TextTable::kRight, 6},
       {"detectors (campaigns, median to first)", TextTable::kLeft, 40}},
      TextTable::Markdown());
  std::printf("%s", table.HeaderText().c_str());
  std::fflush(stdout);
  json rows = json::array();
  int false_alarms = 0, healthy_campaigns = 0, errors = 0;
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
    Up up(c, dir);
    if (!up.ok()) {
      std::fprintf(stderr, "kvcanary-engine up did not start for %s\n",
                   c.name.c_str());
      return 2;
    }
    std::optional<SwingingLoad> load;
    if (c.swinging_load) load.emplace(up.url("router"));
    for (const std::string& mode : c.modes) {
      if (!modes.empty() && !absl::StrContains(modes, mode)) continue;
      std::vector<Campaign> runs;
      for (int s = 0; s < seeds; ++s)
        runs.push_back(RunCampaign(c, up, mode, s, dir));
      json row = Summarise(c, mode, runs);
      if (c.healthy) {
        false_alarms += row["with_any_finding"].get<int>();
        healthy_campaigns += row["campaigns"].get<int>();
      }
      errors += row["errors"].get<int>();
      if (load.has_value()) row["load_requests"] = load->requests();
      std::printf("%s",
                  table
                      .RowText({c.name, mode,
                                Rate(row["with_any_finding"], row["campaigns"]),
                                absl::StrCat(row["inconclusive"].get<int>()),
                                absl::StrCat(row["errors"].get<int>()),
                                DetectorCell(row)})
                      .c_str());
      std::fflush(stdout);
      rows.push_back(std::move(row));
    }
  }
  const double elapsed =
      std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf(
      "\nhealthy campaigns with any finding (false alarms): %d of %d; %.0f s "
      "in all\n",
      false_alarms, healthy_campaigns, elapsed);
  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    const json doc = {{"machine", MachineLine()},
                      {"duration_s", absl::GetFlag(FLAGS_duration)},
                      {"seeds", seeds},
                      {"elapsed_s", elapsed},
                      {"healthy_false_alarms", false_alarms},
                      {"healthy_campaigns", healthy_campaigns},
                      {"rows", rows}};
    if (!WriteFileAtomically(json_path, doc.dump(2), 0644).ok()) {
      std::fprintf(stderr, "kvcanary-bench-detect: cannot write %s\n",
                   json_path.c_str());
      return 2;
    }
  }
  rmdir(dir.c_str());
  const bool fail = absl::GetFlag(FLAGS_fail_on_false_alarm) &&
                    (false_alarms > 0 || errors > 0);
  return fail ? 1 : 0;
}

}  // namespace
}  // namespace kvcanary::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Detection power: campaigns against `kvcanary-engine up` for a matrix "
      "of configurations; rates with 95% Wilson intervals.");
  absl::ParseCommandLine(argc, argv);
  return kvcanary::bench::Main();
}
