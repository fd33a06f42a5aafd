// kvcanary-bench-auditor: the auditor's throughput figures, each measured
// directly in one run: the marker scanner (MB/s of real stories260K
// completions, generated in this run, against 10,000 active markers:
// concatenated and one completion at a time, beside the RE2 scanner it
// replaced, with the floors), evidence inserts (single durable appends
// and batches of 100), shadow-ledger replay (trace events per second), and
// the KV event subscriber (events/s followed; CPU at 10,000 events/s).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "auditor/trace/shadow_ledger.h"
#include "bench/kv_events_bench.h"
#include "bench/machine.h"
#include "bench/story_corpus.h"
#include "canaries/marker.h"
#include "canaries/reference_scanner.h"
#include "canaries/scanner.h"
#include "storage/evidence_store.h"

ABSL_FLAG(int, markers, 10000, "active markers in the scanner");
ABSL_FLAG(std::string, dir, "/tmp",
          "directory for the evidence database and the scanner's corpus");
ABSL_FLAG(std::string, shared_dir, "../shared",
          "where models/stories260K.bin and tok512.bin live");
ABSL_FLAG(double, scan_mb, 4, "MB of completions to generate and scan");
ABSL_FLAG(int, generate_threads, 1,
          "threads generating the completions (engine thread included)");
ABSL_FLAG(bool, kv_events_only, false,
          "measure only the KV event subscriber (no corpus, no evidence)");
ABSL_FLAG(int, kv_events_flood, 400000,
          "events a publisher floods the KV event subscriber with");
ABSL_FLAG(double, kv_events_rate, 10000,
          "events/s of the paced KV event stream whose CPU cost is measured");
ABSL_FLAG(bool, regenerate_corpus, false,
          "generate the completions anew, not from the copy in --dir");

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

// The floors (issue 13, item 2), printed next to the figures.
constexpr double kConcatenatedFloorMBps = 1000;
constexpr double kOneAtATimeFloorMBps = 500;
// Completions scanned one at a time: the sizes the floor is set for.
constexpr size_t kMinOneBytes = 200, kMaxOneBytes = 600;
// A pass over 4 MB takes milliseconds; on a shared machine the best of
// many is the scanner's own speed.
constexpr int kReps = 20;

// MB/s of scan() over `bytes`, the best of `reps` runs.
template <typename Scan>
double BestMBps(size_t bytes, int reps, Scan&& scan) {
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    scan();
    best = std::max(best, bytes / 1e6 / Seconds(t0));
  }
  return best;
}

struct ScanFigures {
  double compile_s = 0;
  double concatenated_mbps = 0;
  double one_at_a_time_mbps = 0;
  std::vector<kvcanary::canaries::MarkerHit> hits;  // in the concatenation
  size_t one_at_a_time_hits = 0;                    // in one pass
};

// One scanner (MarkerScanner or the RE2 reference) over the corpus: the
// concatenation, then each completion alone.
template <typename ScannerT>
ScanFigures Measure(const std::vector<kvcanary::canaries::Marker>& markers,
                    const std::string& concatenated,
                    const std::vector<const std::string*>& one_at_a_time,
                    size_t one_bytes) {
  ScannerT scanner(kvcanary::canaries::kDefaultMinPartialWords);
  for (size_t i = 0; i < markers.size(); ++i) {
    scanner.Add(markers[i], "t" + std::to_string(i % 8));
  }
  ScanFigures f;
  const auto t0 = Clock::now();
  const absl::Status compiled = scanner.Compile();
  f.compile_s = Seconds(t0);
  if (!compiled.ok()) {
    std::fprintf(stderr, "scanner compile failed: %s\n",
                 compiled.ToString().c_str());
    std::exit(1);
  }
  f.concatenated_mbps = BestMBps(concatenated.size(), kReps,
                                 [&] { f.hits = scanner.Scan(concatenated); });
  f.one_at_a_time_mbps = BestMBps(one_bytes, kReps, [&] {
    f.one_at_a_time_hits = 0;
    for (const std::string* c : one_at_a_time) {
      f.one_at_a_time_hits += scanner.Scan(*c).size();
    }
  });
  return f;
}

// "1234 MB/s (floor 1000 MB/s: met; RE2 reference 105 MB/s)".
std::string Versus(double mbps, double floor, double reference) {
  char line[160];
  std::snprintf(line, sizeof(line),
                "%.0f MB/s (floor %.0f MB/s: %s; RE2 reference %.0f MB/s)",
                mbps, floor, mbps >= floor ? "met" : "NOT met", reference);
  return line;
}

// The scanner on real completions against 10,000 active markers, beside
// the RE2 scanner it replaced, both in this run. Ends the run if either
// misses the planted marker or they disagree: a wrong scan is no speed.
void Scanner(const kvcanary::bench::StoryCorpus& corpus) {
  using namespace kvcanary::canaries;
  const int n = absl::GetFlag(FLAGS_markers);
  std::vector<Marker> markers;
  for (int i = 0; i < n; ++i) {
    markers.push_back(DeriveMarker("bench-key-0123456789",
                                   "t" + std::to_string(i % 8), "bench", i));
  }
  // The completions joined by line breaks, one marker planted mid-way so
  // the scan does real matching work too.
  std::string text;
  std::vector<const std::string*> small;
  size_t small_bytes = 0;
  for (size_t i = 0; i < corpus.completions.size(); ++i) {
    const std::string& c = corpus.completions[i];
    if (i == corpus.completions.size() / 2) text += markers[n / 2].text + "\n";
    text += c + "\n";
    if (c.size() >= kMinOneBytes && c.size() <= kMaxOneBytes) {
      small.push_back(&c);
      small_bytes += c.size();
    }
  }
  const ScanFigures fast =
      Measure<MarkerScanner>(markers, text, small, small_bytes);
  const ScanFigures re2 =
      Measure<ReferenceMarkerScanner>(markers, text, small, small_bytes);
  const bool found =
      std::any_of(fast.hits.begin(), fast.hits.end(), [&](const MarkerHit& h) {
        return h.marker_id == markers[n / 2].id && h.exact;
      });
  if (!found || fast.hits.size() != re2.hits.size() ||
      fast.one_at_a_time_hits != re2.one_at_a_time_hits) {
    std::fprintf(stderr,
                 "scanner benchmark: planted marker %s; hits %zu and %zu one "
                 "at a time against the reference's %zu and %zu\n",
                 found ? "found" : "MISSED", fast.hits.size(),
                 fast.one_at_a_time_hits, re2.hits.size(),
                 re2.one_at_a_time_hits);
    std::exit(1);
  }
  std::printf(
      "| scanner, %d markers: compile | %.3f s (RE2 reference %.2f s) |\n", n,
      fast.compile_s, re2.compile_s);
  std::printf(
      "| scanner: %.1f MB, %zu completions concatenated (hits: %zu) | %s |\n",
      text.size() / 1e6, corpus.completions.size(), fast.hits.size(),
      Versus(fast.concatenated_mbps, kConcatenatedFloorMBps,
             re2.concatenated_mbps)
          .c_str());
  std::printf(
      "| scanner: %zu completions of %zu-%zu bytes (mean %zu), one at a time | "
      "%s |\n",
      small.size(), kMinOneBytes, kMaxOneBytes,
      small.empty() ? 0 : small_bytes / small.size(),
      Versus(fast.one_at_a_time_mbps, kOneAtATimeFloorMBps,
             re2.one_at_a_time_mbps)
          .c_str());
}

void PrintCorpus(const kvcanary::bench::StoryCorpus& corpus) {
  if (!corpus.note.empty()) {
    std::printf("note: %s; the scanner figures are on %s instead\n",
                corpus.note.c_str(), corpus.model.c_str());
  }
  std::printf("scanner corpus: %zu completions of %s, %.1f MB, ",
              corpus.completions.size(), corpus.model.c_str(),
              corpus.bytes / 1e6);
  if (corpus.generate_s > 0) {
    std::printf(
        "generated in %.0f s (kept in %s)\n", corpus.generate_s,
        corpus.cache_path.empty() ? "no file" : corpus.cache_path.c_str());
  } else {
    std::printf(
        "generated by an earlier run, read from %s "
        "(--regenerate_corpus to generate anew)\n",
        corpus.cache_path.c_str());
  }
}

void Evidence() {
  using namespace kvcanary::storage;
  const std::string path = absl::GetFlag(FLAGS_dir) + "/kvcanary-bench-" +
                           std::to_string(getpid()) + ".db";
  auto store = EvidenceStore::Open(path);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return;
  }
  EvidenceRecord r;
  r.kind = "probe";
  r.campaign = "bench";
  r.ts_us = 1;
  r.body = {{"probe", 1},       {"kind", "sniff"},
            {"tenant", "acme"}, {"outcome", "ok"},
            {"ms", 3.5},        {"output_sha256", std::string(64, 'a')}};
  // Any failed append or verify ends the benchmark: a failure must never
  // read as speed.
  auto must = [&path](const absl::Status& s, const char* what) {
    if (s.ok()) return;
    std::fprintf(stderr, "evidence benchmark: %s failed: %s\n", what,
                 s.ToString().c_str());
    std::remove(path.c_str());
    std::exit(1);
  };
  const int single = 500;
  auto t0 = Clock::now();
  for (int i = 0; i < single; ++i) must((*store)->Append(r).status(), "append");
  const double single_rate = single / Seconds(t0);
  std::vector<EvidenceRecord> batch(100, r);
  const int batches = 100;
  t0 = Clock::now();
  for (int i = 0; i < batches; ++i) {
    must((*store)->Append(batch).status(), "batch append");
  }
  const double batch_rate = batches * 100 / Seconds(t0);
  t0 = Clock::now();
  auto report = EvidenceStore::Verify(path);
  must(report.status(), "verify");
  if (!report->ok || report->rows_checked != single + batches * 100) {
    must(absl::DataLossError("the chain does not verify whole: " +
                             report->problem),
         "verify");
  }
  const double verify_rate = report->rows_checked / Seconds(t0);
  std::printf("| evidence: single durable appends | %.0f rows/s |\n",
              single_rate);
  std::printf("| evidence: batches of 100 | %.0f rows/s |\n", batch_rate);
  std::printf("| evidence: verify | %.0f rows/s |\n", verify_rate);
  store->reset();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((path + suffix).c_str());
  }
}

void Ledger() {
  using namespace kvcanary;
  // A decode node's life: requests of 8 tenants allocate 4 pages, write
  // them, read them for 16 steps, free them.
  std::vector<TraceEvent> events;
  uint64_t req = 1;
  for (int r = 0; r < 20000; ++r, ++req) {
    for (uint32_t p = 0; p < 4; ++p) {
      TraceEvent e;
      e.node = TraceNode::kDecode;
      e.page = PageId((r * 4 + p) % 256);
      e.gen = PageGeneration(r + 1);
      e.tenant = TenantId(1 + r % 8);
      e.request = RequestId(req);
      e.type = TraceEventType::kPageAlloc;
      events.push_back(e);
      e.type = TraceEventType::kPageWrite;
      e.first_slot = 0;
      e.last_slot_exclusive = 16;
      e.writer_gen = e.gen;
      events.push_back(e);
      e.type = TraceEventType::kPageRead;
      e.slots = 16;
      for (int s = 0; s < 16; ++s) events.push_back(e);
      e.type = TraceEventType::kPageFree;
      events.push_back(e);
    }
  }
  double best = 0;
  size_t found = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auditor::ShadowLedger ledger;
    const auto t0 = Clock::now();
    for (const TraceEvent& e : events) ledger.Apply(e);
    best = std::max(best, events.size() / Seconds(t0));
    found = ledger.findings().size();
  }
  std::printf("| shadow ledger replay | %.2f M events/s (%zu findings) |\n",
              best / 1e6, found);
  // The same events as a node streams them: kvt2 text, parsed and applied.
  std::string text;
  for (const TraceEvent& e : events) EncodeTo(e, &text);
  best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auditor::ShadowLedger ledger;
    TraceLineReader reader;
    const auto t0 = Clock::now();
    reader.Feed(text);
    size_t n = 0;
    while (true) {
      auto e = reader.Next();
      if (!e.ok() || !e->has_value()) break;
      ledger.Apply(**e);
      ++n;
    }
    best = std::max(best, n / Seconds(t0));
  }
  std::printf("| kvt2 text parsed and replayed | %.2f M events/s (%.0f MB) |\n",
              best / 1e6, text.size() / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  kvcanary::bench::PrintMachine();
  if (absl::GetFlag(FLAGS_kv_events_only)) {
    std::printf("| figure | value |\n|---|---|\n");
    return kvcanary::bench::KvEventsBench(absl::GetFlag(FLAGS_kv_events_flood),
                                          absl::GetFlag(FLAGS_kv_events_rate),
                                          5)
               ? 0
               : 1;
  }
  kvcanary::bench::StoryCorpusOptions corpus_options;
  corpus_options.shared_dir = absl::GetFlag(FLAGS_shared_dir);
  corpus_options.bytes =
      static_cast<size_t>(absl::GetFlag(FLAGS_scan_mb) * 1e6);
  corpus_options.threads = absl::GetFlag(FLAGS_generate_threads);
  corpus_options.cache_dir = absl::GetFlag(FLAGS_dir);
  corpus_options.regenerate = absl::GetFlag(FLAGS_regenerate_corpus);
  const kvcanary::bench::StoryCorpus corpus =
      kvcanary::bench::GenerateStoryCorpus(corpus_options);
  PrintCorpus(corpus);
  std::printf("| figure | value |\n|---|---|\n");
  Scanner(corpus);
  Evidence();
  Ledger();
  if (!kvcanary::bench::KvEventsBench(absl::GetFlag(FLAGS_kv_events_flood),
                                      absl::GetFlag(FLAGS_kv_events_rate), 5)) {
    return 1;
  }
  return 0;
}
