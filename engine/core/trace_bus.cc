#include "engine/core/trace_bus.h"

#include <algorithm>
#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvcanary::engine {

std::vector<std::string> TraceBus::Reader::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !lines_.empty();
  };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  std::vector<std::string> out(std::make_move_iterator(lines_.begin()),
                               std::make_move_iterator(lines_.end()));
  lines_.clear();
  return out;
}

void TraceBus::Reader::Offer(const std::string& line,
                             const TraceEvent& header) {
  {
    absl::MutexLock lock(&mu_);
    // Room for the event, and for a `dropped` event in front of it.
    if (lines_.size() + (dropped_ > 0 ? 2 : 1) > capacity_) {
      ++dropped_;
      dropped_total_.fetch_add(1);
      last_dropped_ = header;
      return;
    }
    if (dropped_ > 0) {
      TraceEvent d;
      d.type = TraceEventType::kDropped;
      d.seq = last_dropped_.seq;
      d.ts_us = last_dropped_.ts_us;
      d.node = last_dropped_.node;
      d.count = dropped_;
      std::string s;
      EncodeTo(d, &s);
      lines_.push_back(std::move(s));
      dropped_ = 0;
    }
    lines_.push_back(line);
  }
}

TraceBus::TraceBus(TraceNode node, size_t reader_capacity,
                   uint32_t read_sample_every)
    : node_(node),
      reader_capacity_(std::max<size_t>(reader_capacity, 2)),
      read_sample_every_(read_sample_every) {}

void TraceBus::Emit(TraceEvent event) {
  absl::MutexLock lock(&mu_);
  event.seq = seq_.fetch_add(1) + 1;
  if (num_readers_.load() == 0) return;  // nobody listening: nothing to encode
  event.ts_us =
      static_cast<uint64_t>(absl::ToInt64Microseconds(absl::Now() - start_));
  event.node = node_;
  std::string line;
  EncodeTo(event, &line);
  for (const auto& r : readers_) r->Offer(line, event);
}

std::shared_ptr<TraceBus::Reader> TraceBus::Subscribe() {
  auto reader = std::make_shared<Reader>(reader_capacity_);
  absl::MutexLock lock(&mu_);
  readers_.push_back(reader);
  num_readers_.fetch_add(1);
  return reader;
}

void TraceBus::Unsubscribe(const std::shared_ptr<Reader>& reader) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(readers_.begin(), readers_.end(), reader);
  if (it == readers_.end()) return;
  readers_.erase(it);
  num_readers_.fetch_sub(1);
}

absl::StatusOr<std::unique_ptr<TraceFileWriter>> TraceFileWriter::Open(
    TraceBus* bus, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot open trace file ", path));
  }
  return std::unique_ptr<TraceFileWriter>(new TraceFileWriter(bus, f));
}

absl::StatusOr<std::unique_ptr<TraceFileWriter>> TraceFileWriter::OpenIfSet(
    TraceBus* bus, const std::string& path) {
  if (path.empty()) return std::unique_ptr<TraceFileWriter>();
  return Open(bus, path);
}

TraceFileWriter::TraceFileWriter(TraceBus* bus, std::FILE* file)
    : bus_(bus), file_(file), reader_(bus->Subscribe()) {
  thread_ = std::thread([this] {
    while (true) {
      const bool last = stop_.load();
      for (const std::string& line : reader_->Wait(absl::Milliseconds(100))) {
        std::fwrite(line.data(), 1, line.size(), file_);
      }
      std::fflush(file_);
      if (last) return;
    }
  });
}

TraceFileWriter::~TraceFileWriter() {
  stop_.store(true);
  thread_.join();
  bus_->Unsubscribe(reader_);
  std::fclose(file_);
}

}  // namespace kvcanary::engine
