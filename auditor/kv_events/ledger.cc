#include "auditor/kv_events/ledger.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "common/check.h"
#include "common/random.h"

namespace kvcanary::auditor::kv_events {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t RandomKey() { return RandomU64(); }

const char* BreakName(Break::Kind k) {
  switch (k) {
    case Break::kGap:
      return "gap";
    case Break::kRestart:
      return "restart";
    case Break::kUndecodable:
      return "undecodable";
    case Break::kTruncated:
      return "truncated";
  }
  return "?";
}

}  // namespace

namespace {

// The engines' medium names (vLLM's and SGLang's), one table both ways.
constexpr struct {
  const char* name;
  Medium medium;
} kMediumNames[] = {{"GPU", Medium::kGpu},
                    {"CPU", Medium::kCpu},
                    {"CPU_PINNED", Medium::kCpuPinned},
                    {"DISK", Medium::kDisk},
                    {"STORAGE", Medium::kStorage},
                    {"EXTERNAL", Medium::kExternal}};

}  // namespace

Medium ParseMedium(absl::string_view name) {
  if (name.empty()) return Medium::kNone;
  for (const auto& n : kMediumNames) {
    if (absl::EqualsIgnoreCase(name, n.name)) return n.medium;
  }
  return Medium::kOther;
}

const char* MediumName(Medium m) {
  if (m == Medium::kNone) return "";
  for (const auto& n : kMediumNames) {
    if (n.medium == m) return n.name;
  }
  return "other";
}

nlohmann::json Break::ToJson() const {
  return {{"kind", BreakName(kind)}, {"epoch", epoch},
          {"from_seq", from_seq},    {"to_seq", to_seq},
          {"recovered", recovered},  {"at_us", at_us},
          {"detail", detail}};
}

nlohmann::json LedgerStats::ToJson() const {
  return {{"messages", messages},
          {"events", events},
          {"stored_blocks", stored_blocks},
          {"removed_blocks", removed_blocks},
          {"cleared", cleared},
          {"unknown_events", unknown_events},
          {"array_events", array_events},
          {"map_events", map_events},
          {"gaps", gaps},
          {"gaps_recovered", gaps_recovered},
          {"missing_messages", missing_messages},
          {"restarts", restarts},
          {"undecodable", undecodable},
          {"replayed_messages", replayed_messages},
          {"dropped_entries", dropped_entries}};
}

bool Span::whole() const {
  if (truncated) return false;
  for (const Break& b : breaks) {
    if (!(b.kind == Break::kGap && b.recovered)) return false;
  }
  return true;
}

Ledger::Ledger(size_t max_entries)
    : max_entries_(std::max<size_t>(max_entries, 2)),
      digest_key_(RandomKey()) {}

uint64_t Ledger::Digest(const int64_t* tokens, size_t n) const {
  uint64_t h = Mix(digest_key_ ^ n);
  for (size_t i = 0; i < n; ++i) {
    h = Mix(h ^ static_cast<uint64_t>(tokens[i]) ^ (i << 40));
  }
  return h == 0 ? 1 : h;
}

void Ledger::Append(BlockEntry e) {
  if (entries_.size() >= max_entries_) {
    const size_t drop = entries_.size() / 2;
    entries_.erase(entries_.begin(), entries_.begin() + drop);
    first_index_ += drop;
    stats_.dropped_entries += static_cast<int64_t>(drop);
  }
  entries_.push_back(std::move(e));
  ++now_.index;
}

void Ledger::AddBreak(Break b) {
  breaks_.push_back(std::move(b));
  ++now_.breaks;
}

void Ledger::Ingest(int64_t seq, const Batch& batch, int64_t recv_us) {
  absl::MutexLock lock(&mu_);
  if (now_.epoch == 0) now_.epoch = 1;
  now_.seq = seq;
  ++stats_.messages;
  stats_.unknown_events += batch.unknown_events;
  stats_.array_events += batch.array_events ? 1 : 0;
  stats_.map_events += batch.map_events ? 1 : 0;
  for (const Event& ev : batch.events) {
    ++stats_.events;
    BlockEntry base;
    base.type = ev.type;
    base.medium = ParseMedium(ev.medium);
    base.epoch = now_.epoch;
    base.seq = seq;
    base.recv_us = recv_us;
    base.block_size = ev.block_size;
    if (ev.type == EventType::kAllBlocksCleared) {
      ++stats_.cleared;
      Append(base);
      continue;
    }
    const size_t n = ev.block_hashes.size();
    const bool whole_blocks =
        ev.block_size > 0 &&
        ev.token_ids.size() == n * static_cast<size_t>(ev.block_size);
    for (size_t i = 0; i < n; ++i) {
      BlockEntry e = base;
      e.hash = ev.block_hashes[i];
      if (ev.type == EventType::kBlockStored) {
        ++stats_.stored_blocks;
        if (i == 0) {
          e.parent = ev.parent;
        } else {
          e.parent = ev.block_hashes[i - 1];
        }
        if (whole_blocks) {
          const size_t bs = static_cast<size_t>(ev.block_size);
          e.token_digest = Digest(ev.token_ids.data() + i * bs, bs);
        }
      } else {
        ++stats_.removed_blocks;
      }
      Append(std::move(e));
    }
  }
}

void Ledger::RecordGap(int64_t from, int64_t to, bool recovered,
                       int64_t at_us) {
  absl::MutexLock lock(&mu_);
  ++stats_.gaps;
  if (recovered) {
    ++stats_.gaps_recovered;
  } else {
    stats_.missing_messages += to - from + 1;
  }
  Break b;
  b.kind = Break::kGap;
  b.epoch = std::max(now_.epoch, 1);
  b.from_seq = from;
  b.to_seq = to;
  b.recovered = recovered;
  b.at_us = at_us;
  AddBreak(std::move(b));
}

void Ledger::RecordUndecodable(int64_t seq, const std::string& why,
                               int64_t at_us) {
  absl::MutexLock lock(&mu_);
  ++stats_.undecodable;
  if (now_.epoch == 0) now_.epoch = 1;
  now_.seq = seq;
  Break b;
  b.kind = Break::kUndecodable;
  b.epoch = now_.epoch;
  b.from_seq = b.to_seq = seq;
  b.at_us = at_us;
  b.detail = why;
  AddBreak(std::move(b));
}

void Ledger::RecordRestart(int64_t last_seq, int64_t seq, int64_t at_us) {
  absl::MutexLock lock(&mu_);
  ++stats_.restarts;
  Break b;
  b.kind = Break::kRestart;
  b.epoch = now_.epoch + 1;
  b.from_seq = last_seq;
  b.to_seq = seq;
  b.at_us = at_us;
  b.detail = "the publisher's sequence numbers started again";
  now_.epoch += 1;
  now_.seq = seq - 1;
  AddBreak(std::move(b));
}

void Ledger::CountReplayed(int64_t n) {
  absl::MutexLock lock(&mu_);
  stats_.replayed_messages += n;
}

Mark Ledger::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

Span Ledger::Since(const Mark& from) const {
  Mark to;
  {
    absl::MutexLock lock(&mu_);
    to = now_;
  }
  return Between(from, to);
}

Span Ledger::Between(const Mark& from, const Mark& to) const {
  CHECK(to.index >= from.index && to.breaks >= from.breaks);
  absl::MutexLock lock(&mu_);
  CHECK(to.index <= now_.index && to.breaks <= now_.breaks);
  Span s;
  s.from = from;
  s.to = to;
  s.truncated = from.index < first_index_;
  for (uint64_t i = std::max(from.index, first_index_); i < to.index; ++i) {
    s.entries.push_back(entries_[i - first_index_]);
  }
  s.breaks.assign(breaks_.begin() + from.breaks, breaks_.begin() + to.breaks);
  return s;
}

LedgerStats Ledger::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kvcanary::auditor::kv_events
