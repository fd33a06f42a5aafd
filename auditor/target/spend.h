// What a command spent at a provider (docs/targets.md, "Rate limits and
// budgets"): the tokens each tenant's answers reported, the answers that
// were rate-limited, and --budget-tokens, the most the command may spend.
// Every command's Target keeps one ledger; the result shows it per tenant
// and the metrics export it.
#ifndef KVCANARY_AUDITOR_TARGET_SPEND_H_
#define KVCANARY_AUDITOR_TARGET_SPEND_H_

#include <cstdint>
#include <map>
#include <string>

#include "auditor/target/completion.h"
#include "nlohmann/json.hpp"

namespace kvcanary::auditor {

struct TenantSpend {
  // As the answers' usage reported them; cached_tokens is part of
  // prompt_tokens, as a provider bills it (the shared head included).
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  // 200 answers whose usage said nothing: their tokens are not in the
  // counts above; the budget counts each as the largest answer seen.
  int64_t unreported = 0;
  int64_t rate_limited = 0;  // 429/503 answers, retried or not
  int64_t retries = 0;       // requests sent again after one

  int64_t tokens() const { return prompt_tokens + completion_tokens; }
  nlohmann::json ToJson() const;
};

// Not thread-safe (its Target's).
class SpendLedger {
 public:
  // 0: no budget.
  explicit SpendLedger(int64_t budget_tokens = 0) : budget_(budget_tokens) {}

  // An answer to a request of `tenant` (its name).
  void Note(const std::string& tenant, const Completion& c);
  void NoteRetry(const std::string& tenant) { ++tenants_[tenant].retries; }

  // Reported tokens, with each unreported answer counted as largest().
  int64_t spent() const;
  // The most tokens (prompt + completion) one answer reported so far.
  int64_t largest() const { return largest_; }
  int64_t budget() const { return budget_; }
  // Whether `more` requests (beside those already answered, e.g. in
  // flight) may still be sent: spent() + more * largest() is within the
  // budget. Always with no budget, or before any answer reported tokens.
  bool Affordable(int more) const;
  // Set once a request was not sent for the budget (NoteStopped()).
  bool stopped() const { return stopped_; }
  void NoteStopped() { stopped_ = true; }

  const std::map<std::string, TenantSpend>& tenants() const { return tenants_; }
  // {"budget_tokens": N or null, "budget_reached": bool, "tokens": total,
  //  "tenants": {name: TenantSpend}} (docs/campaign-result.schema.json).
  nlohmann::json ToJson() const;

 private:
  const int64_t budget_;
  int64_t largest_ = 0;
  bool stopped_ = false;
  std::map<std::string, TenantSpend> tenants_;
};

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_SPEND_H_
