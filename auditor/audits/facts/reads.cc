#include "auditor/audits/facts/reads.h"

#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "auditor/target/multi_client.h"
#include "common/sha256.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

constexpr int kConcurrentReads = 4;
constexpr size_t kMaxReadBytes = 16 << 20;

}  // namespace

const std::vector<std::string>& FactsTargetPaths() {
  // docs/targets.md: vLLM and kvcanary /version, TGI /info, llama.cpp
  // /props and /slots, SGLang /get_server_info, /server_info,
  // /get_model_info and /model_info, Ollama /api/* and "/"; most /health
  // and /metrics. In the order their fields are taken: the endpoints that
  // describe the server first.
  static const std::vector<std::string> kPaths = {
      "/version",     "/info",        "/props",     "/get_server_info",
      "/server_info", "/api/version", "/v1/models", "/get_model_info",
      "/model_info",  "/api/ps",      "/api/tags",  "/slots",
      "/metrics",     "/health",      "/"};
  return kPaths;
}

const std::vector<std::string>& FactsNodePaths() {
  // engine/node_common.cc AddEngineNodeRoutes.
  static const std::vector<std::string> kPaths = {"/health", "/metrics",
                                                  "/internal/v1/limits"};
  return kPaths;
}

std::string EndpointName(const ReadSpec& spec) {
  return spec.node ? absl::StrCat("GET ", spec.base, spec.path)
                   : absl::StrCat("GET ", spec.path);
}

std::map<std::string, std::string> RevealingHeaders(
    const std::map<std::string, std::string>& headers) {
  static const std::set<std::string> kTransport = {
      "date",       "content-length", "content-type",
      "connection", "keep-alive",     "transfer-encoding"};
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : headers) {
    if (kTransport.count(name)) continue;
    if (name == "set-cookie" || name == "cookie") {
      out[name] = absl::StrCat("sha256:", Sha256Hex(value));
    } else if (absl::StrContains(name, "request-id") ||
               absl::StrContains(name, "request_id")) {
      out[name] = "(per request)";  // an id, not a fact about the server
    } else {
      out[name] = value;
    }
  }
  return out;
}

json EndpointRead::Evidence() const {
  json j = {{"endpoint", spec.path}, {"base", spec.node ? spec.base : "target"},
            {"reader", spec.reader}, {"after_plant", after_plant},
            {"http_status", status}, {"ms", ms}};
  if (answered()) {
    j["bytes"] = body.size();
    j["body_sha256"] = sha256;
    auto ct = headers.find("content-type");
    if (ct != headers.end()) j["content_type"] = ct->second;
    j["headers"] = RevealingHeaders(headers);
  } else {
    j["error"] = error;
  }
  return j;
}

std::vector<EndpointRead> ReadEndpoints(const std::vector<ReadSpec>& specs,
                                        absl::Duration timeout,
                                        bool after_plant) {
  std::vector<EndpointRead> reads(specs.size());
  size_t next = 0;
  MultiClient client(kConcurrentReads, kMaxReadBytes);
  client.Run(
      [&]() -> std::optional<ProbeRequest> {
        if (next >= specs.size()) return std::nullopt;
        const ReadSpec& s = specs[next];
        ProbeRequest r;
        r.id = next++;
        r.url = s.base + s.path;
        if (!s.api_key.empty()) {
          r.headers.push_back("Authorization: Bearer " + s.api_key);
        }
        r.timeout = timeout;
        return r;  // no body: a GET
      },
      [&](ProbeResponse resp) {
        EndpointRead& read = reads[resp.id];
        read.spec = specs[resp.id];
        read.after_plant = after_plant;
        read.ms = absl::ToDoubleMilliseconds(resp.total);
        if (!resp.transport.ok()) {
          read.error = std::string(resp.transport.message());
          return;
        }
        read.status = resp.status;
        read.body = std::move(resp.body);
        read.sha256 = Sha256Hex(read.body);
        read.headers = std::move(resp.headers);
      },
      [&] { return next >= specs.size(); });
  return reads;
}

}  // namespace kvcanary::auditor
