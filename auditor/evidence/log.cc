#include "auditor/evidence/log.h"

#include <random>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kvcanary::auditor {

absl::StatusOr<std::unique_ptr<EvidenceLog>> EvidenceLog::Open(
    const std::string& path, std::string campaign) {
  auto store = storage::EvidenceStore::Open(path);
  if (!store.ok()) return store.status();
  return std::unique_ptr<EvidenceLog>(
      new EvidenceLog(*std::move(store), std::move(campaign)));
}

absl::Status EvidenceLog::Record(const std::string& kind, nlohmann::json body,
                                 bool flush) {
  storage::EvidenceRecord r;
  r.kind = kind;
  r.campaign = campaign_;
  r.ts_us = absl::ToUnixMicros(absl::Now());
  r.body = std::move(body);
  pending_.push_back(std::move(r));
  if (flush || pending_.size() >= 64) return Flush();
  return absl::OkStatus();
}

absl::Status EvidenceLog::Flush() {
  if (pending_.empty()) return absl::OkStatus();
  auto seqs = store_->Append(pending_);
  if (!seqs.ok()) return seqs.status();
  pending_.clear();
  if (!seqs->empty()) {
    if (first_seq_ == 0) first_seq_ = seqs->front();
    last_seq_ = seqs->back();
  }
  return absl::OkStatus();
}

std::string NewCampaignId() {
  std::random_device rd;
  std::string raw;
  for (int i = 0; i < 4; ++i) raw.push_back(static_cast<char>(rd() & 0xff));
  return absl::StrCat(
      "c", absl::FormatTime("%Y%m%dT%H%M%S", absl::Now(), absl::UTCTimeZone()),
      "-", absl::BytesToHexString(raw));
}

}  // namespace kvcanary::auditor
