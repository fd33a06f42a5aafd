#include "engine/router.h"

#include <condition_variable>
#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/node_common.h"
#include "engine/openai_api.h"

namespace kvcanary::engine {
namespace {

// The decode node's NDJSON stream, read on a thread of its own so the
// client's handler can wait for headers first (and answer with the right
// status) and then relay lines as they come. Thread-safe.
class DecodeStream {
 public:
  DecodeStream(const std::string& url, std::string body,
               absl::Duration timeout) {
    thread_ = std::thread([this, url, body = std::move(body), timeout] {
      httplib::Client client(url);
      const auto secs = absl::ToChronoSeconds(timeout).count();
      client.set_connection_timeout(5, 0);
      client.set_read_timeout(secs, 0);
      client.set_write_timeout(secs, 0);
      httplib::Request r;
      r.method = "POST";
      r.path = "/internal/v1/generate";
      r.set_header("Content-Type", "application/json");
      r.body = body;
      r.response_handler = [this](const httplib::Response& resp) {
        std::lock_guard<std::mutex> lock(mu_);
        headers_ = true;
        http_status_ = resp.status;
        cv_.notify_all();
        return true;
      };
      r.content_receiver = [this](const char* data, size_t n, uint64_t,
                                  uint64_t) {
        if (cancel_.load()) return false;
        std::lock_guard<std::mutex> lock(mu_);
        if (http_status_ != 200) {
          error_body_.append(data, n);
          return true;
        }
        buffer_.append(data, n);
        size_t nl;
        while ((nl = buffer_.find('\n')) != std::string::npos) {
          auto j = nlohmann::json::parse(buffer_.substr(0, nl), nullptr, false);
          buffer_.erase(0, nl + 1);
          if (j.is_object()) lines_.push_back(std::move(j));
        }
        cv_.notify_all();
        return true;
      };
      auto result = client.send(r);
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      if (!result && !cancel_.load()) {
        transport_ = absl::UnavailableError(absl::StrCat(
            "decode node ", url, ": ", httplib::to_string(result.error())));
      }
      cv_.notify_all();
    });
  }
  ~DecodeStream() {
    cancel_.store(true);
    thread_.join();
  }
  // Waits for the response headers: OK if 200, else the node's error.
  absl::Status WaitHeaders() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return headers_ || done_; });
    if (!headers_) return transport_;
    if (http_status_ == 200) return absl::OkStatus();
    cv_.wait(lock, [&] { return done_; });
    return StatusFromInternalResponse(http_status_, error_body_);
  }
  // The next line; nullopt when the stream ended (see transport()).
  std::optional<nlohmann::json> Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !lines_.empty() || done_; });
    if (lines_.empty()) return std::nullopt;
    nlohmann::json j = std::move(lines_.front());
    lines_.pop_front();
    return j;
  }
  absl::Status transport() {
    std::lock_guard<std::mutex> lock(mu_);
    return transport_.ok() ? absl::UnavailableError("decode stream ended early")
                           : transport_;
  }
  void Cancel() { cancel_.store(true); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool headers_ = false;
  int http_status_ = 0;
  std::string error_body_;
  std::string buffer_;
  std::deque<nlohmann::json> lines_;
  bool done_ = false;
  absl::Status transport_;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace

Router::Router(const Tokenizer* tokenizer, const TenantRegistry* tenants,
               const RouterOptions& options)
    : tokenizer_(tokenizer),
      tenants_(tenants),
      options_(options),
      metrics_("router"),
      tenant_in_flight_(new std::atomic<int>[tenants->tenants().size() + 1]()) {
  created_ = absl::ToUnixSeconds(absl::Now());
}

Router::~Router() { Stop(); }

absl::Status Router::FetchLimits() {
  max_prompt_tokens_ = 1 << 30;
  decode_max_prompt_tokens_ = 1 << 30;
  context_tokens_ = 1 << 30;
  std::vector<std::string> nodes = options_.prefill_urls;
  nodes.insert(nodes.end(), options_.decode_urls.begin(),
               options_.decode_urls.end());
  if (options_.prefill_urls.empty() || options_.decode_urls.empty()) {
    return absl::InvalidArgumentError(
        "the router needs at least one prefill and one decode node");
  }
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const std::string& url = nodes[n];
    const bool is_decode = n >= options_.prefill_urls.size();
    while (true) {
      httplib::Client client(url);
      client.set_connection_timeout(1, 0);
      auto res = client.Get("/internal/v1/limits");
      if (res && res->status == 200) {
        auto j = nlohmann::json::parse(res->body, nullptr, false);
        if (!j.is_object() || !j.contains("max_prompt_tokens") ||
            !j["max_prompt_tokens"].is_number_integer() ||
            !j.contains("context_tokens") ||
            !j["context_tokens"].is_number_integer()) {
          return absl::DataLossError(
              absl::StrCat("node ", url, " sent malformed limits"));
        }
        max_prompt_tokens_ =
            std::min(max_prompt_tokens_, j["max_prompt_tokens"].get<int>());
        if (is_decode) {
          decode_max_prompt_tokens_ = std::min(
              decode_max_prompt_tokens_, j["max_prompt_tokens"].get<int>());
        }
        context_tokens_ =
            std::min(context_tokens_, j["context_tokens"].get<int>());
        break;
      }
      if (absl::Now() > deadline) {
        return absl::UnavailableError(
            absl::StrCat("node ", url, " did not answer"));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  return absl::OkStatus();
}

absl::Status Router::Start() {
  absl::Status limits = FetchLimits();
  if (!limits.ok()) return limits;
  server_ = MakeHttpServer(options_.http_threads);
  server_->Post("/v1/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleCompletion(req, res, /*chat=*/false);
                });
  server_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleCompletion(req, res, /*chat=*/true);
                });
  server_->Get("/v1/models", [this](const httplib::Request& req,
                                    httplib::Response& res) {
    auto tenant = tenants_->Authenticate(req.get_header_value("Authorization"));
    if (!tenant.ok()) {
      res.status = HttpStatusFor(tenant.status().code());
      res.set_content(ErrorBody(tenant.status()), "application/json");
      return;
    }
    res.set_content(ModelsJson(options_.model_name, created_, context_tokens_,
                               std::min(max_prompt_tokens_, context_tokens_)),
                    "application/json");
  });
  server_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{\"status\":\"ok\",\"role\":\"router\"}",
                    "application/json");
  });
  server_->Get("/metrics", [this](const httplib::Request&,
                                  httplib::Response& res) {
    res.set_content(metrics_.Serialize(nullptr), "text/plain; version=0.0.4");
  });
  auto port = BindAndServe(server_.get(), options_.host, options_.http_port,
                           &server_thread_);
  if (!port.ok()) return port.status();
  http_port_ = *port;
  return absl::OkStatus();
}

void Router::Stop() {
  if (server_ != nullptr) server_->stop();
  if (server_thread_.joinable()) server_thread_.join();
}

void Router::HandleCompletion(const httplib::Request& req,
                              httplib::Response& res, bool chat) {
  auto fail = [&](const absl::Status& status) {
    metrics_.CountRequest(status);
    res.status = HttpStatusFor(status.code());
    res.set_content(ErrorBody(status), "application/json");
  };
  auto tenant = tenants_->Authenticate(req.get_header_value("Authorization"));
  if (!tenant.ok()) return fail(tenant.status());
  auto parsed = ParseCompletionRequest(req.body, chat);
  if (!parsed.ok()) return fail(parsed.status());
  const CompletionRequest request = *std::move(parsed);
  std::vector<int> prompt =
      tokenizer_->Encode(request.prompt, /*bos=*/true, /*eos=*/false);
  const int prompt_tokens = static_cast<int>(prompt.size());
  // Admission: the one length check, against the smallest node limit.
  // (admission-abort-lost: the check against the prefill tier's limit is
  // left to the prefill node, as in the incident.)
  const int prompt_limit = options_.faults.has(Fault::kAdmissionAbortLost)
                               ? decode_max_prompt_tokens_
                               : max_prompt_tokens_;
  if (prompt_tokens > prompt_limit ||
      prompt_tokens + request.max_tokens > context_tokens_) {
    return fail(
        ContextLengthExceeded(prompt_tokens, request.max_tokens,
                              std::min(max_prompt_tokens_, context_tokens_)));
  }
  if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
    in_flight_.fetch_sub(1);
    return fail(absl::ResourceExhaustedError(
        "too many requests in flight; retry later"));
  }
  std::atomic<int>& tenant_count = tenant_in_flight_[(*tenant)->id.value()];
  const int tenant_limit = (*tenant)->max_concurrent_requests;
  if (tenant_count.fetch_add(1) >= tenant_limit && tenant_limit > 0) {
    tenant_count.fetch_sub(1);
    in_flight_.fetch_sub(1);
    return fail(absl::ResourceExhaustedError(
        absl::StrCat("tenant ", (*tenant)->name, " has ", tenant_limit,
                     " requests in flight; retry later")));
  }
  // Releases the two counts when the last holder (this handler, or the
  // streaming provider) is done. Built in place: a copy would release twice.
  class InFlight {
   public:
    InFlight(std::atomic<int>* total, std::atomic<int>* tenant)
        : total_(total), tenant_(tenant) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() {
      total_->fetch_sub(1);
      tenant_->fetch_sub(1);
    }

   private:
    std::atomic<int>* total_;
    std::atomic<int>* tenant_;
  };
  auto guard = std::make_shared<InFlight>(&in_flight_, &tenant_count);
  const uint64_t node = next_node_.fetch_add(1);
  const std::string& prefill =
      options_.prefill_urls[node % options_.prefill_urls.size()];
  const std::string& decode =
      options_.decode_urls[node % options_.decode_urls.size()];
  const uint64_t request_id = next_request_.fetch_add(1);
  // From here on every answer, error or not, names the request: the id the
  // body's "id" and the engine's trace carry too.
  res.set_header(kRequestIdHeader, absl::StrCat(request_id));
  nlohmann::json body;
  body["request_id"] = request_id;
  body["tenant_id"] = (*tenant)->id.value();
  body["prompt"] = prompt;
  body["max_tokens"] = request.max_tokens;
  body["temperature"] = request.temperature;
  body["top_p"] = request.top_p;
  if (request.seed.has_value()) body["seed"] = *request.seed;
  body["prefill_url"] = prefill;
  auto stream = std::make_shared<DecodeStream>(decode, body.dump(),
                                               options_.node_timeout);
  absl::Status started = stream->WaitHeaders();
  if (!started.ok()) return fail(started);

  CompletionResult result;
  result.id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", request_id);
  result.model = options_.model_name;
  result.created = absl::ToUnixSeconds(absl::Now());
  result.prompt_tokens = prompt_tokens;
  // Pulls the next piece of text; returns false at the end (result filled).
  struct Relay {
    std::shared_ptr<DecodeStream> stream;
    const Tokenizer* tokenizer;
    StopMatcher stop;
    int prev_token;
    absl::Status error;
    bool finished = false;
  };
  auto relay = std::make_shared<Relay>(Relay{stream, tokenizer_,
                                             StopMatcher(request.stop),
                                             prompt.back(), absl::OkStatus()});
  auto next = [relay](CompletionResult* r, std::string* delta) -> bool {
    delta->clear();
    while (!relay->finished) {
      auto line = relay->stream->Next();
      if (!line.has_value()) {
        relay->error = relay->stream->transport();
        relay->finished = true;
        break;
      }
      if (line->contains("tokens")) {
        std::string text;
        for (const auto& t : (*line)["tokens"]) {
          const int token = t.get<int>();
          text += relay->tokenizer->DecodeForPrint(relay->prev_token, token);
          relay->prev_token = token;
          ++r->completion_tokens;
        }
        StopMatcher::Emit emit = relay->stop.Feed(text);
        *delta += emit.text;
        if (emit.stopped) {
          r->finish_reason = "stop";
          relay->finished = true;
          relay->stream->Cancel();
        }
        if (!delta->empty()) return true;
        continue;
      }
      // The final line.
      relay->finished = true;
      *delta += relay->stop.Flush();
      const std::string reason = line->value("finish_reason", "");
      r->finish_reason = reason == "length" ? "length" : "stop";
      if (line->contains("error")) {
        relay->error = StatusFromInternalResponse(
            500, nlohmann::json{{"error", (*line)["error"]}}.dump());
      }
    }
    return !delta->empty();
  };

  if (!request.stream) {
    std::string delta;
    while (next(&result, &delta)) result.text += delta;
    if (!relay->error.ok()) return fail(relay->error);
    metrics_.CountRequest(absl::OkStatus());
    res.set_content(CompletionResponseJson(result, chat), "application/json");
    return;
  }
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, relay, next, result, chat, guard](
          size_t, httplib::DataSink& sink) mutable {
        std::string delta;
        if (next(&result, &delta)) {
          const std::string chunk =
              StreamChunkSse(result, delta, chat, /*final_chunk=*/false);
          result.text += delta;
          if (!sink.write(chunk.data(), chunk.size())) {
            relay->stream->Cancel();
            return false;
          }
          return true;
        }
        std::string tail;
        if (relay->error.ok()) {
          tail = StreamChunkSse(result, "", chat, /*final_chunk=*/true) +
                 StreamDoneSse();
        } else {
          tail = "data: " + ErrorBody(relay->error) + "\n\n" + StreamDoneSse();
        }
        metrics_.CountRequest(relay->error);
        sink.write(tail.data(), tail.size());
        sink.done();
        return true;
      },
      [relay](bool) { relay->stream->Cancel(); });
}

}  // namespace kvcanary::engine
