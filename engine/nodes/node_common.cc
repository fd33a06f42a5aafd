#include "engine/nodes/node_common.h"

#include <atomic>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/json_strict.h"
#include "common/page_stamp.h"
#include "common/status_macros.h"
#include "common/tenants_file.h"
#include "engine/core/engine_loop.h"
#include "engine/core/trace_bus.h"
#include "engine/model/logprobs.h"
#include "engine/nodes/http_listener_metrics.h"
#include "engine/nodes/node_metrics.h"
#include "engine/nodes/node_settings.h"
#include "engine/nodes/openai_api.h"

namespace kvcanary::engine {

std::string InternalErrorBody(const absl::Status& status) {
  nlohmann::json j;
  j["error"]["message"] = std::string(status.message());
  j["error"]["code"] = static_cast<int>(status.code());
  return j.dump();
}

absl::Status StatusFromInternalResponse(int http_status,
                                        const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("code") && j["error"]["code"].is_number_integer() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    const int code = j["error"]["code"].get<int>();
    if (code > 0 && code <= 16) {
      return absl::Status(static_cast<absl::StatusCode>(code),
                          j["error"]["message"].get<std::string>());
    }
  }
  return absl::InternalError(absl::StrCat("peer answered HTTP ", http_status));
}

void RespondInternalError(http::Response& res, const absl::Status& status,
                          const nlohmann::json& extra) {
  res.status = HttpStatusFor(status.code());
  if (!extra.is_object()) {
    res.set_content(InternalErrorBody(status), "application/json");
    return;
  }
  nlohmann::json j = extra;
  j["error"] = nlohmann::json::parse(InternalErrorBody(status))["error"];
  res.set_content(j.dump(), "application/json");
}

absl::Status NodeCallError(const char* role, const std::string& url,
                           httplib::Error error) {
  const char* what = "the call failed";
  switch (error) {
    case httplib::Error::Connection:
      what = "connection refused or unreachable";
      break;
    case httplib::Error::ConnectionTimeout:
      what = "did not accept the connection in time";
      break;
    case httplib::Error::Read:
      what = "connection lost or timed out while reading its answer";
      break;
    case httplib::Error::Write:
      what = "connection lost while sending the request";
      break;
    case httplib::Error::Canceled:
      what = "the call was cancelled";
      break;
    default:
      break;
  }
  return absl::UnavailableError(absl::StrCat(
      role, " node ", url, ": ", what, " (", httplib::to_string(error), ")"));
}

absl::StatusOr<NodeUrl> ParseNodeUrl(const std::string& url,
                                     const tls::Context* tls) {
  auto bad = [&url](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("node URL '", url, "': ", why));
  };
  NodeUrl out;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    out.https = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return bad("want http://HOST:PORT or https://HOST:PORT");
  }
  absl::ConsumeSuffix(&rest, "/");
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return bad("want HOST:PORT after the scheme");
  }
  absl::string_view host = rest.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return bad("unclosed '['");
  }
  if (host.empty() || absl::StrContains(host, "/") ||
      absl::StrContains(host, "@")) {
    return bad("bad host");
  }
  if (!absl::SimpleAtoi(rest.substr(colon + 1), &out.port) || out.port <= 0 ||
      out.port > 65535) {
    return bad("bad port");
  }
  out.host = std::string(host);
  if (out.https && tls == nullptr) {
    return bad("https:// needs mutual TLS (--tls_cert, --tls_key, --tls_ca)");
  }
  if (!out.https && tls != nullptr) {
    return bad("this deployment runs mutual TLS: use https://");
  }
  return out;
}

std::unique_ptr<httplib::ClientImpl> NodeClient(const std::string& url,
                                                const tls::Context* tls) {
  absl::StatusOr<NodeUrl> parsed = ParseNodeUrl(url, tls);
  CHECK(parsed.ok()) << parsed.status();
  if (!parsed->https) {
    return std::make_unique<httplib::ClientImpl>(parsed->host, parsed->port);
  }
  auto client = std::make_unique<httplib::SSLClient>(parsed->host, parsed->port,
                                                     tls->cert(), tls->key());
  // Only the deployment CA: with no CA path the client would fall back to
  // the system's trust store.
  client->set_ca_cert_path(tls->files().ca.c_str());
  client->enable_server_certificate_verification(true);
  return client;
}

std::string OutcomeText(const absl::Status& status) {
  if (status.ok()) return "ok";
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ",
                      status.message());
}

absl::StatusOr<nlohmann::json> ParseJsonObject(const std::string& body) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonStrict(body));
  if (!j.is_object()) {
    return absl::InvalidArgumentError("body is not a JSON object");
  }
  return j;
}

absl::StatusOr<uint64_t> JsonUint(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_number_unsigned()) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' must be a non-negative integer"));
  }
  return it->get<uint64_t>();
}

absl::StatusOr<double> JsonNumber(const nlohmann::json& j, const char* field,
                                  double default_value) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return default_value;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' must be a number"));
  }
  return it->get<double>();
}

absl::StatusOr<std::string> JsonString(const nlohmann::json& j,
                                       const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' must be a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<std::vector<int>> JsonTokenArray(const nlohmann::json& j,
                                                const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' must be an array"));
  }
  std::vector<int> out;
  out.reserve(it->size());
  for (const auto& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", field, "' must hold token ids"));
    }
    out.push_back(t.get<int>());
  }
  return out;
}

EngineOptions WithTrace(EngineOptions options, TraceBus* trace) {
  options.trace = trace;
  return options;
}

bool Authorized(const http::Request& req, const SharedSecret& secret,
                const char* what, http::Response& res) {
  if (secret.CheckAuthorization(req.get_header_value("Authorization"))) {
    return true;
  }
  RespondInternalError(res, absl::UnauthenticatedError(absl::StrCat(
                                "this route requires the ", what)));
  return false;
}

void AddEngineNodeRoutes(http::Server* server, const std::string& role,
                         int max_prompt_tokens, const EngineLoop* loop,
                         NodeMetrics* metrics, TraceBus* trace,
                         const NodeCredentials* creds) {
  // The trace stream (docs/trace-format.md): one line per event, for as
  // long as the reader stays; a slow reader gets `dropped` events. It
  // carries every tenant's request ids, lengths and timings: admin token
  // only, and a bounded number of readers.
  auto readers = std::make_shared<std::atomic<int>>(0);
  server->Get("/v1/trace", [trace, creds, readers](const http::Request& req,
                                                   http::Response& res) {
    if (!creds->trace.set()) {
      RespondInternalError(
          res, absl::PermissionDeniedError(
                   "the trace stream is off: the node has no trace token"));
      return;
    }
    if (!Authorized(req, creds->trace, "trace token", res)) return;
    if (readers->fetch_add(1) >= creds->max_trace_readers) {
      readers->fetch_sub(1);
      RespondInternalError(
          res, absl::UnavailableError(absl::StrCat("the trace stream has its ",
                                                   creds->max_trace_readers,
                                                   " readers; retry later")));
      return;
    }
    auto reader = trace->Subscribe();
    res.set_chunked_content_provider(
        "text/plain",
        [trace, reader](size_t, http::DataSink& sink) {
          for (const std::string& line :
               reader->Wait(absl::Milliseconds(200))) {
            if (!sink.write(line.data(), line.size())) return false;
          }
          return sink.is_writable();
        },
        [trace, reader, readers](bool) {
          trace->Unsubscribe(reader);
          readers->fetch_sub(1);
        });
  });
  server->Get("/internal/v1/limits", [=](const http::Request& req,
                                         http::Response& res) {
    if (!Authorized(req, creds->internal, "internal secret", res)) return;
    const NodeSettings settings = NodeSettings::Of(
        loop->options(),
        PoolOptionsFor(loop->model().config, loop->options()).num_pages,
        max_prompt_tokens, loop->model().config.seq_len);
    res.set_content(settings.ToJson().dump(), "application/json");
  });
  // "Expect: 100-continue" on an internal route: the secret first, then
  // the 100 and the body (the handler checks it again, for everyone else).
  server->set_expect_continue_handler(
      [creds](const http::Request& req, http::Response& res) {
        if (!absl::StartsWith(req.path, "/internal/")) return true;
        return Authorized(req, creds->internal, "internal secret", res);
      });
  server->Get("/health", [role](const http::Request&, http::Response& res) {
    nlohmann::json j;
    j["status"] = "ok";
    j["role"] = role;
    res.set_content(j.dump(), "application/json");
  });
}

absl::StatusOr<int> ServeMetrics(http::Server* main, const std::string& role,
                                 const std::string& host, int port,
                                 std::function<std::string()> text,
                                 std::unique_ptr<http::Server>* separate) {
  // The API listener's connection cap, beside the role's own metrics.
  auto listener = std::make_shared<HttpListenerMetrics>(main, role);
  auto handler = [text, listener](const http::Request&, http::Response& res) {
    res.set_content(text() + listener->Text(), "text/plain; version=0.0.4");
  };
  if (port < 0) {
    main->Get("/metrics", handler);
    return -1;
  }
  *separate = MakeHttpServer(4);
  (*separate)->Get("/metrics", handler);
  (*separate)->Get("/health", [](const http::Request&, http::Response& res) {
    res.set_content("{\"status\":\"ok\"}", "application/json");
  });
  return BindAndServe(separate->get(), host, port);
}

std::optional<std::string> OptionalString(const nlohmann::json& j,
                                          const char* field) {
  if (!j.is_object() || !j.contains(field) || !j[field].is_string()) {
    return std::nullopt;
  }
  return j[field].get<std::string>();
}

absl::StatusOr<NodeRequest> ParseNodeRequest(const nlohmann::json& body) {
  NodeRequest r;
  auto request_id = JsonUint(body, "request_id");
  auto tenant_id = JsonUint(body, "tenant_id");
  auto prompt = JsonTokenArray(body, "prompt");
  auto temperature = JsonNumber(body, "temperature", 0.0);
  auto top_p = JsonNumber(body, "top_p", 1.0);
  for (const absl::Status& s :
       {request_id.status(), tenant_id.status(), prompt.status(),
        temperature.status(), top_p.status()}) {
    if (!s.ok()) return s;
  }
  if (*request_id == 0 || *tenant_id == 0 || *tenant_id > UINT32_MAX) {
    return absl::InvalidArgumentError(
        "request_id and tenant_id must be non-zero");
  }
  if (RequestId(*request_id) == kReservedRequestId) {
    return absl::InvalidArgumentError(
        "field 'request_id': 18446744073709551615 (2^64 - 1) is reserved and "
        "names no request");
  }
  r.id = RequestId(*request_id);
  r.tenant = TenantId(static_cast<uint32_t>(*tenant_id));
  r.prompt = *std::move(prompt);
  r.sampling.temperature = static_cast<float>(*temperature);
  r.sampling.top_p = static_cast<float>(*top_p);
  r.sampling.max_tokens = 1;
  if (body.contains("cache_salt")) {
    const nlohmann::json& salt = body["cache_salt"];
    if (!salt.is_string() ||
        !IsValidCacheSalt(salt.get_ref<const std::string&>())) {
      return absl::InvalidArgumentError(
          "field 'cache_salt' must be a valid cache salt");
    }
    r.cache_salt = salt.get<std::string>();
  }
  if (body.contains("seed")) {
    auto seed = JsonUint(body, "seed");
    if (!seed.ok()) return seed.status();
    r.sampling.seed = *seed;
  }
  if (body.contains("logprobs")) {
    auto top = JsonUint(body, "logprobs");
    if (!top.ok() || *top > static_cast<uint64_t>(kMaxTopLogprobs)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field 'logprobs' must be an integer in [0, ", kMaxTopLogprobs, "]"));
    }
    r.sampling.logprobs = static_cast<int>(*top);
  }
  if (body.contains("prompt_logprobs")) {
    if (!body["prompt_logprobs"].is_boolean()) {
      return absl::InvalidArgumentError(
          "field 'prompt_logprobs' must be a boolean");
    }
    r.sampling.prompt_logprobs = body["prompt_logprobs"].get<bool>();
  }
  if (body.contains("max_tokens")) {
    auto max_tokens = JsonUint(body, "max_tokens");
    if (!max_tokens.ok()) return max_tokens.status();
    r.sampling.max_tokens =
        static_cast<int>(std::min<uint64_t>(*max_tokens, 1 << 20));
  }
  return r;
}

std::unique_ptr<http::Server> MakeHttpServer(
    int threads, std::shared_ptr<const tls::Context> tls,
    int max_unoccupied_per_address) {
  http::Options options;
  options.handler_threads = threads;
  options.tls = std::move(tls);
  options.max_unoccupied_per_address = max_unoccupied_per_address;
  // A body over the limit is refused (413) before it is read, when its
  // Content-Length says so, and as soon as it passes the limit otherwise.
  options.max_body_bytes = kMaxRequestBodyBytes;
  auto server = std::make_unique<http::Server>(options);
  // Errors the HTTP layer answers itself get the OpenAI error shape too (it
  // calls this only for responses with no body yet, so our handlers' own
  // error bodies are left as they are). The HTTP status stays the layer's.
  server->set_error_handler([](const http::Request& req, http::Response& res) {
    absl::Status status;
    switch (res.status) {
      case 400:
        status = absl::InvalidArgumentError(
            req.get_header_value_count("Authorization") > 1
                ? "more than one Authorization header"
                : "malformed request");
        break;
      case 413:
        status = absl::InvalidArgumentError(
            absl::StrCat("request body too large: the limit is ",
                         kMaxRequestBodyBytes, " bytes"));
        break;
      case 404:
        status = absl::NotFoundError("unknown path");
        break;
      case 405:
        status = absl::InvalidArgumentError("method not allowed on this path");
        break;
      case 408:
        status = absl::InvalidArgumentError(
            "request not received in time; send it faster");
        break;
      case 431:
        status = absl::InvalidArgumentError("request headers too large");
        break;
      case 503:
        status = absl::UnavailableError("too many connections; retry later");
        break;
      default:
        status = res.status < 500
                     ? absl::InvalidArgumentError("malformed request")
                     : absl::InternalError("internal error");
    }
    res.set_content(ErrorBody(status), "application/json");
  });
  return server;
}

absl::StatusOr<int> BindAndServe(http::Server* server, const std::string& host,
                                 int port) {
  auto bound = server->Bind(host, port);
  if (!bound.ok()) return bound.status();
  server->Start();
  return bound;
}

}  // namespace kvcanary::engine
