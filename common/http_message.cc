// Request and Response of the HTTP server: header lookup without case,
// header setting without field injection, the streamed body's provider, and
// the reason phrase of each status the server knows.
#include "common/http_message.h"

#include <string>
#include <utility>

#include "absl/strings/match.h"

namespace kvcanary::http {
namespace {

bool HasCrLf(absl::string_view s) {
  return s.find_first_of("\r\n") != absl::string_view::npos;
}

const std::string* FindHeader(const Headers& headers, absl::string_view name) {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

}  // namespace

// --- Request, Response -----------------------------------------------------

std::string Request::get_header_value(absl::string_view name) const {
  const std::string* value = FindHeader(headers, name);
  return value == nullptr ? std::string() : *value;
}

bool Request::has_header(absl::string_view name) const {
  return FindHeader(headers, name) != nullptr;
}

size_t Request::get_header_value_count(absl::string_view name) const {
  size_t n = 0;
  for (const auto& [field, value] : headers) {
    if (absl::EqualsIgnoreCase(field, name)) ++n;
  }
  return n;
}

Response::~Response() {
  if (releaser_) releaser_(provider_success_);
}

void Response::set_header(absl::string_view name, absl::string_view value) {
  if (HasCrLf(name) || HasCrLf(value)) return;  // no field injection
  for (auto it = headers.begin(); it != headers.end();) {
    it = absl::EqualsIgnoreCase(it->first, name) ? headers.erase(it) : it + 1;
  }
  headers.emplace_back(std::string(name), std::string(value));
}

bool Response::has_header(absl::string_view name) const {
  return FindHeader(headers, name) != nullptr;
}

std::string Response::get_header_value(absl::string_view name) const {
  const std::string* value = FindHeader(headers, name);
  return value == nullptr ? std::string() : *value;
}

void Response::set_content(std::string content,
                           absl::string_view content_type) {
  body = std::move(content);
  set_header("Content-Type", content_type);
}

void Response::set_chunked_content_provider(
    absl::string_view content_type, ContentProvider provider,
    ContentProviderResourceReleaser releaser) {
  set_header("Content-Type", content_type);
  body.clear();
  provider_ = std::move(provider);
  releaser_ = std::move(releaser);
}

namespace {

// The reason phrase of each status this server knows, in status order.
struct StatusPhrase {
  int status;
  absl::string_view reason;
};
constexpr StatusPhrase kStatusPhrases[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {204, "No Content"},
    {206, "Partial Content"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {402, "Payment Required"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Payload Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"},
    {422, "Unprocessable Entity"},
    {425, "Too Early"},
    {426, "Upgrade Required"},
    {428, "Precondition Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {451, "Unavailable For Legal Reasons"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
};

}  // namespace

absl::string_view StatusReason(int status) {
  for (const StatusPhrase& phrase : kStatusPhrases) {
    if (phrase.status == status) return phrase.reason;
  }
  return "";
}

}  // namespace kvcanary::http
