// kvcanary-bench-auditor: the auditor's throughput figures, each measured
// directly in one run: the marker scanner (MB/s of model-like output against
// 10,000 active markers), evidence inserts (single durable appends and
// batches of 100), and shadow-ledger replay (trace events per second).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "auditor/shadow_ledger.h"
#include "bench/machine.h"
#include "canaries/marker.h"
#include "canaries/scanner.h"
#include "storage/evidence_store.h"

ABSL_FLAG(int, markers, 10000, "active markers in the scanner");
ABSL_FLAG(std::string, dir, "/tmp", "directory for the evidence database");

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

// Story-like text made of common words (what a model answers with).
std::string StoryText(size_t bytes) {
  static const char* kWords[] = {
      "once",  "upon", "a",    "time",  "there", "was",  "little", "girl",
      "named", "lily", "she",  "loved", "to",    "play", "with",   "her",
      "dog",   "in",   "the",  "park",  "one",   "day",  "they",   "saw",
      "big",   "red",  "ball", "and",   "were",  "very", "happy",  "."};
  std::mt19937 rng(7);
  std::string out;
  while (out.size() < bytes) {
    out += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    out += ' ';
  }
  return out;
}

void Scanner() {
  using namespace kvcanary::canaries;
  const int n = absl::GetFlag(FLAGS_markers);
  MarkerScanner scanner(kDefaultMinPartialWords);
  std::vector<Marker> markers;
  for (int i = 0; i < n; ++i) {
    markers.push_back(DeriveMarker("bench-key-0123456789",
                                   "t" + std::to_string(i % 8), "bench", i));
    scanner.Add(markers.back(), "t" + std::to_string(i % 8));
  }
  auto t0 = Clock::now();
  if (!scanner.Compile().ok()) {
    std::fprintf(stderr, "scanner compile failed\n");
    return;
  }
  const double compile_s = Seconds(t0);
  std::string text = StoryText(4 << 20);
  // One planted marker, so the scan does real matching work too.
  text.insert(text.size() / 2, " " + markers[n / 2].text + " ");
  double best = 0;
  size_t hits = 0;
  for (int r = 0; r < 3; ++r) {
    t0 = Clock::now();
    hits = scanner.Scan(text).size();
    best = std::max(best, text.size() / 1e6 / Seconds(t0));
  }
  std::printf("| scanner, %d markers: compile | %.2f s |\n", n, compile_s);
  std::printf("| scanner, %d markers: scan | %.1f MB/s (%zu hit) |\n", n, best,
              hits);
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
  std::printf("| figure | value |\n|---|---|\n");
  Scanner();
  Evidence();
  Ledger();
  return 0;
}
