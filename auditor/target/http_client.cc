#include "auditor/target/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvcanary {
namespace {

// curl_global_init is not thread-safe and must run once per process before
// any other curl call.
absl::Status EnsureCurlGlobalInit() {
  static absl::once_flag once;
  static CURLcode result = CURLE_OK;
  absl::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (result != CURLE_OK) {
    return absl::InternalError(
        absl::StrCat("curl_global_init failed: ", curl_easy_strerror(result)));
  }
  return absl::OkStatus();
}

struct CurlEasyDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct CurlSlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

// Where curl writes the response body; refuses bytes past the limit.
struct BodySink {
  std::string* body;
  size_t max_bytes;
  bool overflowed = false;
};

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  const size_t bytes = size * count;
  if (bytes > sink->max_bytes - sink->body->size()) {
    sink->overflowed = true;
    return 0;  // makes curl fail the transfer with CURLE_WRITE_ERROR
  }
  sink->body->append(data, bytes);
  return bytes;
}

// A header line must be "Name: value" on one line: a CR/LF in it would let
// a config value inject further headers or a second request.
absl::Status ValidateHeader(absl::string_view header) {
  const size_t colon = header.find(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP header is not `Name: value`: `", header, "`"));
  }
  if (header.find_first_of(absl::string_view("\r\n\0", 3)) !=
      absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP header contains CR, LF or NUL: `", header.substr(0, colon), "`"));
  }
  return absl::OkStatus();
}

// curl_easy_setopt with a known option fails only when this libcurl lacks
// the feature (or memory); the message names the option.
template <typename T>
absl::Status SetOption(CURL* curl, CURLoption option, const char* name, T value,
                       const std::string& url) {
  const CURLcode rc = curl_easy_setopt(curl, option, value);
  if (rc != CURLE_OK) {
    return StatusFromCurl(rc, url, absl::StrCat("setting ", name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StatusFromCurl(int curl_code, absl::string_view url,
                            absl::string_view detail) {
  CHECK_NE(curl_code, CURLE_OK);
  const auto code = static_cast<CURLcode>(curl_code);
  std::string message = absl::StrCat(url, ": ", curl_easy_strerror(code));
  if (!detail.empty()) absl::StrAppend(&message, " (", detail, ")");
  switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
      return absl::UnavailableError(message);
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(message);
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

HttpClient::HttpClient(HttpClientOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<HttpResponse> HttpClient::Post(
    const std::string& url, absl::string_view body,
    const std::vector<std::string>& headers, absl::Duration timeout) const {
  return Perform(url, &body, headers, timeout);
}

absl::StatusOr<HttpResponse> HttpClient::Get(
    const std::string& url, const std::vector<std::string>& headers,
    absl::Duration timeout) const {
  return Perform(url, nullptr, headers, timeout);
}

absl::Status HttpClient::Connect(const std::string& url,
                                 absl::Duration timeout) const {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(url, ": timeout must be positive and finite, got ",
                     absl::FormatDuration(timeout)));
  }
  RETURN_IF_ERROR(EnsureCurlGlobalInit());
  std::unique_ptr<CURL, CurlEasyDeleter> curl(curl_easy_init());
  if (curl == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(url, ": curl_easy_init failed"));
  }
  char error_buffer[CURL_ERROR_SIZE] = {0};
  const long timeout_ms =  // NOLINT(runtime/int): curl's type
      std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));
  CURL* handle = curl.get();
#define KVC_SETOPT(option, value) \
  RETURN_IF_ERROR(SetOption(handle, option, #option, value, url))
  KVC_SETOPT(CURLOPT_URL, url.c_str());
  KVC_SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
  KVC_SETOPT(CURLOPT_NOSIGNAL, 1L);
  KVC_SETOPT(CURLOPT_CONNECT_ONLY, 1L);  // connect (and handshake) only
  KVC_SETOPT(CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  KVC_SETOPT(CURLOPT_TIMEOUT_MS, timeout_ms);
  KVC_SETOPT(CURLOPT_ERRORBUFFER, error_buffer);
#undef KVC_SETOPT
  const CURLcode rc = curl_easy_perform(handle);
  if (rc != CURLE_OK) return StatusFromCurl(rc, url, error_buffer);
  return absl::OkStatus();
}

absl::StatusOr<HttpResponse> HttpClient::Perform(
    const std::string& url, const absl::string_view* body,
    const std::vector<std::string>& headers, absl::Duration timeout) const {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(url, ": timeout must be positive and finite, got ",
                     absl::FormatDuration(timeout)));
  }
  for (const std::string& header : headers) {
    RETURN_IF_ERROR(ValidateHeader(header));
  }
  RETURN_IF_ERROR(EnsureCurlGlobalInit());

  std::unique_ptr<CURL, CurlEasyDeleter> curl(curl_easy_init());
  if (curl == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(url, ": curl_easy_init failed"));
  }
  std::unique_ptr<curl_slist, CurlSlistDeleter> header_list;
  auto add_header = [&header_list](const std::string& line) {
    curl_slist* grown = curl_slist_append(header_list.get(), line.c_str());
    CHECK(grown != nullptr) << "curl_slist_append: out of memory";
    header_list.release();  // now owned through `grown`
    header_list.reset(grown);
  };
  for (const std::string& header : headers) add_header(header);
  // Send the body at once instead of waiting for "100 Continue".
  if (body != nullptr) add_header("Expect:");

  HttpResponse response;
  BodySink sink{&response.body, options_.max_response_bytes};
  char error_buffer[CURL_ERROR_SIZE] = {0};
  const long timeout_ms =  // NOLINT(runtime/int): curl's type
      std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout));

  CURL* handle = curl.get();
#define KVC_SETOPT(option, value) \
  RETURN_IF_ERROR(SetOption(handle, option, #option, value, url))
  KVC_SETOPT(CURLOPT_URL, url.c_str());
  KVC_SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
  KVC_SETOPT(CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: threads
  KVC_SETOPT(CURLOPT_TIMEOUT_MS, timeout_ms);
  KVC_SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
  KVC_SETOPT(CURLOPT_USERAGENT, options_.user_agent.c_str());
  KVC_SETOPT(CURLOPT_ERRORBUFFER, error_buffer);
  KVC_SETOPT(CURLOPT_WRITEFUNCTION, &WriteBody);
  KVC_SETOPT(CURLOPT_WRITEDATA, static_cast<void*>(&sink));
  KVC_SETOPT(CURLOPT_HTTPHEADER, header_list.get());
  if (body != nullptr) {
    KVC_SETOPT(CURLOPT_POST, 1L);
    KVC_SETOPT(CURLOPT_POSTFIELDSIZE_LARGE,
               static_cast<curl_off_t>(body->size()));
    // Not copied: *body outlives curl_easy_perform below.
    KVC_SETOPT(CURLOPT_POSTFIELDS, body->empty() ? "" : body->data());
  } else {
    KVC_SETOPT(CURLOPT_HTTPGET, 1L);
  }
#undef KVC_SETOPT

  const CURLcode rc = curl_easy_perform(handle);
  if (rc == CURLE_WRITE_ERROR && sink.overflowed) {
    return absl::ResourceExhaustedError(
        absl::StrCat(url, ": response body exceeds ",
                     options_.max_response_bytes, " bytes"));
  }
  if (rc != CURLE_OK) return StatusFromCurl(rc, url, error_buffer);

  long status = 0;  // NOLINT(runtime/int): curl's type
  curl_off_t total_us = 0;
  if (curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK ||
      curl_easy_getinfo(handle, CURLINFO_TOTAL_TIME_T, &total_us) != CURLE_OK) {
    return absl::InternalError(
        absl::StrCat(url, ": curl_easy_getinfo failed after a transfer"));
  }
  response.status = static_cast<int>(status);
  response.elapsed = absl::Microseconds(total_us);
  return response;
}

}  // namespace kvcanary
