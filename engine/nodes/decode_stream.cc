#include "engine/nodes/decode_stream.h"

#include "absl/strings/str_cat.h"
#include "engine/nodes/node_common.h"
#include "httplib.h"

namespace kvcanary::engine {

DecodeStream::DecodeStream(const std::string& url, std::string authorization,
                           std::string body, absl::Duration timeout,
                           const tls::Context* tls) {
  thread_ = std::thread([this, url, authorization = std::move(authorization),
                         body = std::move(body), timeout, tls] {
    std::unique_ptr<httplib::ClientImpl> client = NodeClient(url, tls);
    const auto secs = absl::ToChronoSeconds(timeout).count();
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(secs, 0);
    client->set_write_timeout(secs, 0);
    httplib::Request r;
    r.method = "POST";
    r.path = "/internal/v1/generate";
    r.set_header("Content-Type", "application/json");
    r.set_header("Authorization", authorization);
    r.body = body;
    r.response_handler = [this](const httplib::Response& resp) {
      absl::MutexLock lock(&mu_);
      headers_ = true;
      http_status_ = resp.status;
      return true;
    };
    r.content_receiver = [this](const char* data, size_t n, uint64_t,
                                uint64_t) {
      if (cancel_.load()) return false;
      absl::MutexLock lock(&mu_);
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
      return true;
    };
    {
      absl::MutexLock lock(&mu_);
      if (cancel_.load()) {
        done_ = true;
        return;
      }
      client_ = client.get();
    }
    auto result = client->send(r);
    absl::MutexLock lock(&mu_);
    client_ = nullptr;
    done_ = true;
    if (!result && !cancel_.load()) {
      transport_ = NodeCallError("decode", url, result.error());
    }
  });
}

DecodeStream::~DecodeStream() {
  cancel_.store(true);
  thread_.join();
}

void DecodeStream::Cancel() {
  absl::MutexLock lock(&mu_);
  cancel_.store(true);
  if (client_ != nullptr) client_->stop();
}

absl::Status DecodeStream::WaitHeaders() {
  absl::MutexLock lock(&mu_);
  auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return headers_ || done_;
  };
  mu_.Await(absl::Condition(&answered));
  if (!headers_) return transport_;
  if (http_status_ == 200) return absl::OkStatus();
  mu_.Await(absl::Condition(&done_));
  return StatusFromInternalResponse(http_status_, error_body_);
}

nlohmann::json DecodeStream::error_json() {
  absl::MutexLock lock(&mu_);
  if (!headers_ || http_status_ == 200) return nullptr;
  auto j = nlohmann::json::parse(error_body_, nullptr, false);
  return j.is_object() ? j : nlohmann::json();
}

std::optional<nlohmann::json> DecodeStream::Next() {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !lines_.empty() || done_;
  };
  mu_.Await(absl::Condition(&ready));
  if (lines_.empty()) return std::nullopt;
  nlohmann::json j = std::move(lines_.front());
  lines_.pop_front();
  return j;
}

absl::Status DecodeStream::transport() {
  absl::MutexLock lock(&mu_);
  return transport_.ok() ? absl::UnavailableError("decode stream ended early")
                         : transport_;
}

}  // namespace kvcanary::engine
