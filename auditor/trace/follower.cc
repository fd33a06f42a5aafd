#include "auditor/trace/follower.h"

#include <curl/curl.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "auditor/target/http_client.h"
#include "common/clock.h"
#include "common/file.h"

namespace kvcanary::auditor {

absl::StatusOr<std::vector<std::string>> NormalizeTraceUrls(
    std::vector<std::string> urls) {
  for (std::string& u : urls) {
    while (!u.empty() && u.back() == '/') u.pop_back();
    if (u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--trace '", u, "' is not an http(s) URL"));
    }
  }
  return urls;
}

absl::StatusOr<std::string> ReadTraceToken(const std::string& path) {
  if (path.empty()) return std::string();
  absl::StatusOr<std::string> text = ReadFile(path);
  std::string token(absl::StripAsciiWhitespace(text.ok() ? *text : ""));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--trace-token-file ", path, ": unreadable or empty"));
  }
  return token;
}

TraceFollower::TraceFollower(std::string node_url, std::string token,
                             tls::Files tls)
    : url_(std::move(node_url)),
      token_(std::move(token)),
      tls_(std::move(tls)) {}

TraceFollower::~TraceFollower() {
  if (thread_.joinable()) (void)Stop(absl::ZeroDuration());
}

size_t TraceFollower::OnHeader(char* data, size_t size, size_t n, void* p) {
  auto* self = static_cast<TraceFollower*>(p);
  const absl::string_view line(data, size * n);
  if (absl::StartsWith(line, "HTTP/")) {
    long code = 0;
    const size_t sp = line.find(' ');
    if (sp != absl::string_view::npos) code = std::atol(line.data() + sp + 1);
    absl::MutexLock lock(&self->mu_);
    self->http_status_ = code;
  } else if (line == "\r\n" || line == "\n") {
    absl::MutexLock lock(&self->mu_);
    self->answered_ = true;
  }
  return size * n;
}

size_t TraceFollower::OnData(char* data, size_t size, size_t n, void* p) {
  auto* self = static_cast<TraceFollower*>(p);
  {
    absl::MutexLock lock(&self->mu_);
    if (self->http_status_ != 200) return size * n;  // an error body
  }
  self->reader_.Feed(absl::string_view(data, size * n));
  while (true) {
    auto event = self->reader_.Next();
    absl::MutexLock lock(&self->mu_);
    if (!event.ok()) {
      self->status_ = event.status();
      return 0;  // aborts the transfer
    }
    if (!event->has_value()) break;
    self->ledger_.Apply(**event, NowUs());
  }
  return size * n;
}

int TraceFollower::OnProgress(void* p, long, long, long, long) {
  return static_cast<TraceFollower*>(p)->stop_.load() ? 1 : 0;
}

absl::Status TraceFollower::Start(absl::Duration connect_timeout) {
  thread_ = std::thread([this] { Run(); });
  absl::MutexLock lock(&mu_);
  const auto answered_or_failed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return answered_ || !status_.ok();
  };
  mu_.AwaitWithTimeout(absl::Condition(&answered_or_failed), connect_timeout);
  // A refusal's body is short: the stream may have ended (status_ set)
  // before this thread looked; the answer's status is what tells.
  if (!status_.ok() && !(answered_ && http_status_ != 200)) return status_;
  if (!answered_) {
    return absl::DeadlineExceededError(
        absl::StrCat(url_, "/v1/trace: no answer within ",
                     absl::FormatDuration(connect_timeout)));
  }
  if (http_status_ == 401 || http_status_ == 403) {
    return absl::FailedPreconditionError(absl::StrCat(
        url_, "/v1/trace answered HTTP ", http_status_,
        token_.empty()
            ? ": the node requires a trace token (--trace-token-file)"
            : ": the node refused the trace token"));
  }
  if (http_status_ != 200) {
    return absl::FailedPreconditionError(
        absl::StrCat(url_, "/v1/trace answered HTTP ", http_status_,
                     ": not an engine node with a kvcanary trace stream"));
  }
  return absl::OkStatus();
}

void TraceFollower::Run() {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    absl::MutexLock lock(&mu_);
    status_ = absl::InternalError("curl_easy_init failed");
    return;
  }
  const std::string url = url_ + "/v1/trace";
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &TraceFollower::OnData);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &TraceFollower::OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &TraceFollower::OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, this);
  if (!tls_.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, tls_.cert.c_str());
    curl_easy_setopt(curl, CURLOPT_SSLKEY, tls_.key.c_str());
    // The deployment's CA only, not the system's trust store.
    curl_easy_setopt(curl, CURLOPT_CAINFO, tls_.ca.c_str());
    curl_easy_setopt(curl, CURLOPT_CAPATH, nullptr);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  }
  curl_slist* headers = nullptr;
  if (!token_.empty()) {
    const std::string auth = "Authorization: Bearer " + token_;
    headers = curl_slist_append(headers, auth.c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  }
  const CURLcode rc = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  curl_slist_free_all(headers);
  absl::MutexLock lock(&mu_);
  if (rc != CURLE_OK && !(rc == CURLE_ABORTED_BY_CALLBACK && stop_.load()) &&
      status_.ok()) {
    status_ = StatusFromCurl(rc, url, error);
  }
  if (status_.ok() && !stop_.load()) {
    status_ =
        absl::UnavailableError(absl::StrCat(url, ": the trace stream ended"));
  }
}

absl::Status TraceFollower::Stop(absl::Duration grace) {
  if (!thread_.joinable()) return absl::OkStatus();
  absl::SleepFor(grace);
  stop_ = true;
  thread_.join();
  absl::MutexLock lock(&mu_);
  return status_;
}

std::vector<LedgerFinding> TraceFollower::findings() const {
  absl::MutexLock lock(&mu_);
  return ledger_.findings();
}

LedgerStats TraceFollower::stats() const {
  absl::MutexLock lock(&mu_);
  return ledger_.stats();
}

absl::flat_hash_map<uint64_t, uint32_t> TraceFollower::request_tenants() const {
  absl::MutexLock lock(&mu_);
  return ledger_.request_tenants();
}

}  // namespace kvcanary::auditor
