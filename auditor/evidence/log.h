// One command's rows in the evidence store (storage/evidence_store.h): the
// campaign id every row carries, appends batched (64 rows) or at once when
// a row must be durable as it is made, and the seqs written.
// Not thread-safe; owned by the command's thread.
#ifndef KVCANARY_AUDITOR_EVIDENCE_LOG_H_
#define KVCANARY_AUDITOR_EVIDENCE_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "storage/evidence_store.h"

namespace kvcanary::auditor {

class EvidenceLog {
 public:
  // Opens (or creates) the store at `path` for rows of `campaign`.
  static absl::StatusOr<std::unique_ptr<EvidenceLog>> Open(
      const std::string& path, std::string campaign);

  // Queues a row of `kind`; appends the queue when it holds 64 rows or
  // `flush`. A failed append keeps the rows queued, for a retry.
  absl::Status Record(const std::string& kind, nlohmann::json body,
                      bool flush = false);
  absl::Status Flush();

  int64_t first_seq() const { return first_seq_; }  // 0: none written
  int64_t last_seq() const { return last_seq_; }

 private:
  EvidenceLog(std::unique_ptr<storage::EvidenceStore> store,
              std::string campaign)
      : store_(std::move(store)), campaign_(std::move(campaign)) {}

  std::unique_ptr<storage::EvidenceStore> store_;
  const std::string campaign_;
  std::vector<storage::EvidenceRecord> pending_;
  int64_t first_seq_ = 0, last_seq_ = 0;
};

// "c20261203T101500-1a2b3c4d": a new campaign id (UTC time, random suffix).
std::string NewCampaignId();

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_EVIDENCE_LOG_H_
