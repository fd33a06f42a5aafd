// Fan-out of a node's trace events (common/trace_event.h) to its readers:
// GET /v1/trace streams, and an optional file. Emitting never blocks the
// engine: each reader has a bounded queue, and a reader that falls behind
// loses events with a counted, visible `dropped` event in its stream.
// Violations are never sampled away; per-step page reads are traced for a
// sample of requests (every Nth request id).
//
// Thread-safe.
#ifndef KVCANARY_ENGINE_CORE_TRACE_BUS_H_
#define KVCANARY_ENGINE_CORE_TRACE_BUS_H_

#include <atomic>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/trace_event.h"

namespace kvcanary::engine {

// How an engine node traces, shared by the prefill and decode nodes.
struct NodeTraceOptions {
  uint32_t read_sample_every = 1;  // page reads of every Nth request
  std::string file;                // also append the trace here ("" = no file)
  size_t reader_capacity = 1 << 16;  // events queued per trace reader
};

class TraceBus {
 public:
  // One reader's queue of encoded lines. Thread-safe.
  class Reader {
   public:
    explicit Reader(size_t capacity) : capacity_(capacity) {}
    // The lines queued so far (waiting up to `timeout` for the first).
    std::vector<std::string> Wait(absl::Duration timeout);
    uint64_t dropped_total() const { return dropped_total_.load(); }

   private:
    friend class TraceBus;
    void Offer(const std::string& line, const TraceEvent& header);

    const size_t capacity_;
    absl::Mutex mu_;
    std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);
    // Since the last `dropped` event, and the header of the last one lost.
    uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
    TraceEvent last_dropped_ ABSL_GUARDED_BY(mu_);
    std::atomic<uint64_t> dropped_total_{0};
  };

  // `read_sample_every`: trace page reads of requests whose id is a
  // multiple of it (1: all, 0: none).
  TraceBus(TraceNode node, size_t reader_capacity, uint32_t read_sample_every);

  // Stamps seq, ts_us and node, and offers the event to every reader.
  void Emit(TraceEvent event);
  bool SampleReads(RequestId id) const {
    return read_sample_every_ != 0 && id.value() % read_sample_every_ == 0;
  }

  std::shared_ptr<Reader> Subscribe();
  void Unsubscribe(const std::shared_ptr<Reader>& reader);
  uint64_t events_emitted() const { return seq_.load(); }
  // Whether anyone listens: hot paths skip building events when not.
  bool has_readers() const {
    return num_readers_.load(std::memory_order_relaxed) > 0;
  }

 private:
  const TraceNode node_;
  const size_t reader_capacity_;
  const uint32_t read_sample_every_;
  const absl::Time start_ = absl::Now();
  std::atomic<uint64_t> seq_{0};
  std::atomic<int> num_readers_{0};
  absl::Mutex mu_;  // orders emission
  std::vector<std::shared_ptr<Reader>> readers_ ABSL_GUARDED_BY(mu_);
};

// Appends a bus's events to a file, on a thread of its own, until destroyed
// (which writes out what is queued first). A slow disk loses events the
// same visible way a slow reader does. Thread-safe.
class TraceFileWriter {
 public:
  // nullptr when `path` is empty; otherwise as Open().
  static absl::StatusOr<std::unique_ptr<TraceFileWriter>> OpenIfSet(
      TraceBus* bus, const std::string& path);
  // kNotFound / kPermissionDenied naming the path if it cannot be opened.
  static absl::StatusOr<std::unique_ptr<TraceFileWriter>> Open(
      TraceBus* bus, const std::string& path);
  ~TraceFileWriter();

 private:
  TraceFileWriter(TraceBus* bus, std::FILE* file);
  TraceBus* bus_;
  std::FILE* file_;
  std::shared_ptr<TraceBus::Reader> reader_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_CORE_TRACE_BUS_H_
