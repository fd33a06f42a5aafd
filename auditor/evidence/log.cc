#include "auditor/evidence/log.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/random.h"

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
  r.ts_us = NowUs();
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
  return absl::StrCat(
      "c", absl::FormatTime("%Y%m%dT%H%M%S", absl::Now(), absl::UTCTimeZone()),
      "-", RandomHex(4));
}

}  // namespace kvcanary::auditor
