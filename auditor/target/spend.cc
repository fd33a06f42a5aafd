#include "auditor/target/spend.h"

#include <algorithm>

#include "auditor/target/rate_limit.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

json TenantSpend::ToJson() const {
  return {{"prompt_tokens", prompt_tokens},
          {"cached_tokens", cached_tokens},
          {"completion_tokens", completion_tokens},
          {"unreported_answers", unreported},
          {"rate_limited", rate_limited},
          {"retries", retries}};
}

void SpendLedger::Note(const std::string& tenant, const Completion& c) {
  TenantSpend& s = tenants_[tenant];
  if (IsRateLimited(c)) {
    ++s.rate_limited;
    return;
  }
  if (c.status != 200 || c.hung_up) return;
  if (c.prompt_tokens < 0 && c.completion_tokens < 0) {
    ++s.unreported;
    return;
  }
  const int64_t prompt = std::max(0, c.prompt_tokens);
  const int64_t completion = std::max(0, c.completion_tokens);
  s.prompt_tokens += prompt;
  s.completion_tokens += completion;
  // A provider bills what it reported: the shared head Target::Parse took
  // out of cached_tokens is added back.
  if (c.cached_tokens >= 0) {
    s.cached_tokens += c.cached_tokens + c.shared_head_tokens;
  }
  largest_ = std::max(largest_, prompt + completion);
}

int64_t SpendLedger::spent() const {
  int64_t total = 0;
  for (const auto& [name, s] : tenants_) {
    total += s.tokens() + s.unreported * largest_;
  }
  return total;
}

bool SpendLedger::Affordable(int more) const {
  return budget_ <= 0 || spent() + more * largest_ <= budget_;
}

json SpendLedger::ToJson() const {
  json tenants = json::object();
  for (const auto& [name, s] : tenants_) tenants[name] = s.ToJson();
  return {{"budget_tokens", budget_ > 0 ? json(budget_) : json(nullptr)},
          {"budget_reached", stopped_},
          {"tokens", spent()},
          {"tenants", std::move(tenants)}};
}

}  // namespace kvcanary::auditor
