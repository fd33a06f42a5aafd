// The auditor's only HTTP client (libcurl easy interface). It talks to the
// endpoint under audit the way any outside client would; every curl error
// becomes an absl::Status once, in StatusFromCurl. An HTTP error status
// (404, 429, 500...) is not an error here: it is a probe result, returned in
// HttpResponse::status for the detectors to judge.
#ifndef KVCANARY_AUDITOR_TARGET_HTTP_CLIENT_H_
#define KVCANARY_AUDITOR_TARGET_HTTP_CLIENT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvcanary {

struct HttpResponse {
  int status = 0;          // HTTP status code, e.g. 200
  std::string body;        // raw response body
  absl::Duration elapsed;  // whole transfer, connect to last byte
};

struct HttpClientOptions {
  // A response body larger than this fails with kResourceExhausted rather
  // than growing memory without bound on a misbehaving endpoint.
  size_t max_response_bytes = 64 << 20;
  std::string user_agent = "kvcanary-auditor";
};

// Converts a libcurl result (a CURLcode value) into a Status naming `url`:
//   couldn't resolve host/proxy, couldn't connect, and a peer that sends
//   or returns nothing (send/recv error, empty reply)  -> kUnavailable
//   operation timed out                                 -> kDeadlineExceeded
//   malformed URL, unsupported protocol                 -> kInvalidArgument
//   anything else                                       -> kInternal
// `detail` is curl's error buffer (may be empty).
// REQUIRES: curl_code != CURLE_OK.
absl::Status StatusFromCurl(int curl_code, absl::string_view url,
                            absl::string_view detail);

// Thread-safe: every call uses its own curl handle, so probes sent
// concurrently (e.g. as different tenants) share no connection or state.
// Redirects are not followed; only http:// and https:// are allowed.
class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options = HttpClientOptions());

  // POSTs `body` to `url` with `headers` (each "Name: value"; pass a
  // Content-Type). `timeout` bounds the whole call, connect included.
  // Returns the response for any HTTP status; an error Status only if no
  // complete response arrived (see StatusFromCurl), kInvalidArgument for a
  // non-positive timeout or a malformed header, kResourceExhausted for a
  // body over max_response_bytes.
  absl::StatusOr<HttpResponse> Post(const std::string& url,
                                    absl::string_view body,
                                    const std::vector<std::string>& headers,
                                    absl::Duration timeout) const;

  // As Post, for a GET without a body.
  absl::StatusOr<HttpResponse> Get(const std::string& url,
                                   const std::vector<std::string>& headers,
                                   absl::Duration timeout) const;

  // Opens a connection to `url`'s host and port — the TCP connect and, for
  // https://, the TLS handshake — then closes it without sending a request;
  // `timeout` bounds both. OK once connected, else as StatusFromCurl (a
  // handshake not done in time: kDeadlineExceeded; a peer that answered it
  // with something other than TLS: kInternal, curl's SSL connect error).
  absl::Status Connect(const std::string& url, absl::Duration timeout) const;

 private:
  // `body` null: GET.
  absl::StatusOr<HttpResponse> Perform(const std::string& url,
                                       const absl::string_view* body,
                                       const std::vector<std::string>& headers,
                                       absl::Duration timeout) const;

  const HttpClientOptions options_;
};

}  // namespace kvcanary

#endif  // KVCANARY_AUDITOR_TARGET_HTTP_CLIENT_H_
