// The router's info endpoints: GET /v1/models and GET /version (to a
// tenant's key), and GET /health (open; the nodes' URLs and PIDs to the
// admin token only).
#include <algorithm>
#include <functional>
#include <string>

#include "engine/nodes/node_common.h"
#include "engine/nodes/openai_errors.h"
#include "engine/nodes/openai_responses.h"
#include "engine/nodes/router.h"
#include "engine/nodes/version.h"

namespace kvcanary::engine {

void Router::AddInfoRoutes() {
  // Answers `body` to a tenant's key; 401 otherwise.
  auto authenticated = [this](std::function<std::string()> body) {
    return [this, body](const http::Request& req, http::Response& res) {
      auto tenant = CheckKey(req);
      if (!tenant.ok()) {
        res.status = HttpStatusFor(tenant.status().code());
        res.set_content(ErrorBody(tenant.status()), "application/json");
        return;
      }
      res.set_content(body(), "application/json");
    };
  };
  server_->Get(
      "/v1/models", authenticated([this] {
        return ModelsJson(
            options_.model_name, created_, settings_.context_tokens,
            std::min(settings_.max_prompt_tokens, settings_.context_tokens));
      }));
  server_->Get("/version", authenticated([this] {
                 VersionInfo v;
                 v.version = kEngineVersion;
                 v.watermark = settings_.watermark;
                 v.prefix_cache = settings_.prefix_cache;
                 v.cache_salt = settings_.cache_salt;
                 v.host_tier_pages = settings_.host_tier_pages;
                 v.kv_cache_tokens = settings_.kv_cache_tokens;
                 v.tenant_header = options_.tenant_header;
                 v.free_list = settings_.free_list;
                 v.numerics = settings_.numerics;
                 v.kv_checksum = settings_.kv_checksum;
                 v.trace_format = settings_.trace_format;
                 v.max_model_len = settings_.context_tokens;
                 v.max_prompt_tokens = std::min(settings_.max_prompt_tokens,
                                                settings_.context_tokens);
                 v.page_tokens = settings_.page_tokens;
                 return VersionJson(v);
               }));
  server_->Get("/health", [this](const http::Request& req,
                                 http::Response& res) { Health(req, res); });
}

void Router::Health(const http::Request& req, http::Response& res) const {
  // Open to load balancers: up or not, per role. The nodes' URLs and the
  // processes' PIDs map the deployment for an attacker: admin token only.
  // A refusal is an OpenAI error body, as every other answer of the
  // router's (docs/api.md).
  const bool detailed = req.has_header("Authorization");
  absl::Status refused;
  if (detailed && !options_.admin_token.set()) {
    refused = absl::PermissionDeniedError(
        "the router has no admin token (--trace-token-file)");
  } else if (detailed && !options_.admin_token.CheckAuthorization(
                             req.get_header_value("Authorization"))) {
    refused = absl::UnauthenticatedError(
        "GET /health with an Authorization header requires the admin token");
  }
  if (!refused.ok()) {
    res.status = HttpStatusFor(refused.code());
    res.set_content(ErrorBody(refused), "application/json");
    return;
  }
  res.set_content(health_->HealthJson(detailed), "application/json");
}

}  // namespace kvcanary::engine
