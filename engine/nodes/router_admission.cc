// The router's admission of a completion request: the API key (and a
// gateway's tenant header), the body parsed, the model checked, the one
// length check against the smallest node limit, and a place per choice in
// the in-flight counts (overall and the tenant's); each refusal as its
// OpenAI error. Also the key check of "Expect: 100-continue".
#include "engine/nodes/router_admission.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "engine/nodes/openai_errors.h"
#include "engine/nodes/openai_request.h"
#include "engine/nodes/router.h"

namespace kvcanary::engine {
namespace {

// A request whose `n` choices could never all be in flight at once, under
// the tenant's limit or the router's: a 400 naming the limit, never the
// 429 a client would retry for ever. Each choice takes one place.
absl::Status ChoicesThatCannotFit(int n, const Tenant& tenant,
                                  int max_in_flight) {
  std::string why;
  const int tenant_limit = tenant.max_concurrent_requests;
  if (tenant_limit > 0 && n > tenant_limit) {
    why = absl::StrCat("tenant ", tenant.name, " may have at most ",
                       tenant_limit, " requests in flight");
  } else if (n > max_in_flight) {
    why = absl::StrCat("this server runs at most ", max_in_flight,
                       " requests at once");
  } else {
    return absl::OkStatus();
  }
  absl::Status status = absl::InvalidArgumentError(
      absl::StrCat("n=", n,
                   " can never be served: each choice is a request in flight, "
                   "and ",
                   why, "."));
  status.SetPayload(kOpenAiParamUrl, absl::Cord("n"));
  return status;
}

}  // namespace

absl::StatusOr<const Tenant*> Router::CheckKey(const http::Request& req) const {
  return tenants_->Authenticate(req.get_header_value("Authorization"));
}

bool Router::ExpectContinue(const http::Request& req, http::Response& res) {
  if (req.path == "/health" || req.path == "/metrics") return true;
  auto tenant = CheckKey(req);
  if (tenant.ok()) return true;
  if (absl::StartsWith(req.path, "/v1/") &&
      absl::EndsWith(req.path, "completions")) {
    metrics_.CountRequest(tenant.status());
  }
  res.status = HttpStatusFor(tenant.status().code());
  res.set_content(ErrorBody(tenant.status()), "application/json");
  return false;
}

absl::StatusOr<const Tenant*> Router::RequestTenant(
    const http::Request& req, AccessRecord* record) const {
  ASSIGN_OR_RETURN(const Tenant* tenant, CheckKey(req));
  record->tenant = tenant->name;
  if (!tenant->gateway || options_.tenant_header.empty()) return tenant;
  // A gateway's key: the request is the named tenant's, for its limits, its
  // cache and its pages' stamps.
  std::vector<absl::string_view> named;
  for (const auto& [name, value] : req.headers) {
    if (absl::EqualsIgnoreCase(name, options_.tenant_header)) {
      named.push_back(value);
    }
  }
  ASSIGN_OR_RETURN(
      tenant, tenants_->ForGateway(*tenant, options_.tenant_header, named));
  record->tenant = tenant->name;
  return tenant;
}

absl::StatusOr<std::shared_ptr<Router::Admitted>> Router::Admit(
    const http::Request& req, bool chat, AccessRecord* record) {
  auto tenant = RequestTenant(req, record);
  if (!tenant.ok()) return tenant.status();
  auto parsed = ParseCompletionRequest(req.body, chat, options_.chat_template);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->model.empty() && parsed->model != options_.model_name) {
    return ModelNotFound(parsed->model);
  }
  record->stream = parsed->stream;
  auto a = std::make_shared<Admitted>();
  // Admission: the one length check, against the smallest node limit.
  // (admission-abort-lost: the check against the prefill tier's limit is
  // left to the prefill node, as in the incident.)
  const int prompt_limit = options_.faults.has(Fault::kAdmissionAbortLost)
                               ? settings_.decode_max_prompt_tokens
                               : settings_.max_prompt_tokens;
  // A prompt too long for any tokenization to fit is refused before
  // megabytes are tokenized: no token covers more than the longest piece
  // (BOS and the dummy prefix aside).
  const int64_t min_tokens = static_cast<int64_t>(parsed->prompt.size()) /
                             std::max(1, tokenizer_->max_token_length());
  if (min_tokens > prompt_limit) {
    return PromptBytesExceedLimit(
        parsed->prompt.size(), min_tokens,
        std::min(settings_.max_prompt_tokens, settings_.context_tokens));
  }
  a->prompt = tokenizer_->Encode(parsed->prompt, /*bos=*/true, /*eos=*/false);
  const int prompt_tokens = static_cast<int>(a->prompt.size());
  record->prompt_tokens = prompt_tokens;
  if (prompt_tokens > prompt_limit ||
      prompt_tokens + parsed->max_tokens > settings_.context_tokens) {
    return ContextLengthExceeded(
        prompt_tokens, parsed->max_tokens,
        std::min(settings_.max_prompt_tokens, settings_.context_tokens),
        settings_.context_tokens);
  }
  // Each choice takes a place, so `n` cannot take another tenant's share.
  const int n = parsed->n;
  RETURN_IF_ERROR(ChoicesThatCannotFit(n, **tenant, options_.max_in_flight));
  if (in_flight_.fetch_add(n) + n > options_.max_in_flight) {
    in_flight_.fetch_sub(n);
    return absl::ResourceExhaustedError(
        "too many requests in flight; retry later");
  }
  std::atomic<int>& tenant_count = tenant_in_flight_[(*tenant)->id.value()];
  const int tenant_limit = (*tenant)->max_concurrent_requests;
  if (tenant_count.fetch_add(n) + n > tenant_limit && tenant_limit > 0) {
    tenant_count.fetch_sub(n);
    in_flight_.fetch_sub(n);
    return absl::ResourceExhaustedError(
        absl::StrCat("tenant ", (*tenant)->name, " has ", tenant_limit,
                     " requests in flight; retry later"));
  }
  a->in_flight =
      std::make_unique<Admitted::InFlight>(&in_flight_, &tenant_count, n);
  a->request = *std::move(parsed);
  a->tenant = (*tenant)->id;
  for (int i = 0; i < n; ++i) {
    a->choice_ids.push_back(request_ids_.Next().value());
  }
  a->request_id = a->choice_ids[0];
  record->request_id = a->request_id;
  return a;
}

}  // namespace kvcanary::engine
