// A target's base URL, taken the way the OpenAI SDKs take `base_url`:
// `http://host:port` and `http://host:port/v1` (with or without a trailing
// slash, behind a path prefix or not) name the same server. The OpenAI API
// lives under root + "/v1"; the engines' own endpoints (/props, /info,
// /get_server_info, /health, /metrics, /version, /slots, /api/*) under the
// root itself (docs/targets.md). And a check that an https:// target speaks
// TLS at all: a plain-HTTP port would otherwise hold the first request until
// its own header timeout.
#ifndef KVCANARY_AUDITOR_TARGET_TARGET_URL_H_
#define KVCANARY_AUDITOR_TARGET_TARGET_URL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "auditor/target/http_client.h"

namespace kvcanary::auditor {

struct TargetUrl {
  // scheme://host[:port][/prefix]: no "/v1", no trailing slash.
  std::string root;
  bool https = false;

  // root + "/v1" + path, e.g. Api("/completions"). `path` starts with '/'.
  std::string Api(absl::string_view path) const;
  // root + path, e.g. Root("/props"). `path` starts with '/'.
  std::string Root(absl::string_view path) const;
};

// Normalises `url`: surrounding whitespace and trailing slashes dropped, a
// last "/v1" path segment dropped. kInvalidArgument, naming the URL, for
// anything but http:// or https:// with a host, or a URL with a query or a
// fragment.
absl::StatusOr<TargetUrl> ParseTargetUrl(absl::string_view url);

// How long an https:// target's TLS handshake may take before the scheme
// is doubted, and how long the plain-HTTP question then waits.
inline constexpr absl::Duration kTlsHandshakeCheck = absl::Milliseconds(500);
inline constexpr absl::Duration kPlainHttpCheck = absl::Seconds(1);

// For an https:// target: OK if the TLS handshake completes within
// kTlsHandshakeCheck. If it does not, and the same host and port answer a
// plain-HTTP GET with an HTTP status (other than a TLS server's "plain HTTP
// request sent to an HTTPS port" 400), kFailedPrecondition: "https:// to a
// server that answered in plain HTTP: use http://...". Anything else is OK
// here: an unreachable or slow server is for the requests to report.
// http:// targets are always OK.
absl::Status CheckScheme(const HttpClient& http, const TargetUrl& url);

}  // namespace kvcanary::auditor

#endif  // KVCANARY_AUDITOR_TARGET_TARGET_URL_H_
