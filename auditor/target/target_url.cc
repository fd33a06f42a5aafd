#include "auditor/target/target_url.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kvcanary::auditor {

std::string TargetUrl::Api(absl::string_view path) const {
  return absl::StrCat(root, "/v1", path);
}

std::string TargetUrl::Root(absl::string_view path) const {
  return absl::StrCat(root, path);
}

absl::StatusOr<TargetUrl> ParseTargetUrl(absl::string_view url) {
  absl::string_view u = absl::StripAsciiWhitespace(url);
  TargetUrl out;
  absl::string_view rest = u;
  if (absl::StartsWithIgnoreCase(rest, "https://")) {
    out.https = true;
    rest.remove_prefix(8);
  } else if (absl::StartsWithIgnoreCase(rest, "http://")) {
    rest.remove_prefix(7);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--target '", url, "' is not an http:// or https:// URL"));
  }
  if (rest.empty() || rest[0] == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--target '", url, "' has no host"));
  }
  if (rest.find_first_of("?#") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--target '", url,
        "' has a query or a fragment: give the server's base URL"));
  }
  // The OpenAI SDKs' base_url ends in /v1; the auditor adds it itself.
  while (absl::ConsumeSuffix(&u, "/")) {
  }
  if (absl::ConsumeSuffix(&u, "/v1")) {
    while (absl::ConsumeSuffix(&u, "/")) {
    }
  }
  out.root = std::string(u);
  return out;
}

absl::Status CheckScheme(const HttpClient& http, const TargetUrl& url) {
  if (!url.https) return absl::OkStatus();
  const absl::Status tls = http.Connect(url.root, kTlsHandshakeCheck);
  if (tls.ok()) return absl::OkStatus();
  // No TLS in time, or an answer that was not TLS: does the port speak
  // plain HTTP? (A plain-HTTP server may read a ClientHello as the start of
  // a request and wait for the rest until its own header timeout.)
  const std::string plain = absl::StrCat("http://", url.root.substr(8), "/");
  absl::StatusOr<HttpResponse> r = http.Get(plain, {}, kPlainHttpCheck);
  if (!r.ok() || r->status < 100) return absl::OkStatus();
  // nginx and others answer plain HTTP on a TLS port with a 400 that says
  // so: that port does speak TLS (the handshake was just slow).
  if (r->status == 400 &&
      absl::StrContains(absl::AsciiStrToLower(r->body), "https")) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "target ", url.root,
      ": https:// to a server that answered in plain HTTP (no TLS handshake "
      "within ",
      absl::FormatDuration(kTlsHandshakeCheck), ": ", tls.message(),
      "; a plain GET answered HTTP ", r->status, "): use ",
      plain.substr(0, plain.size() - 1)));
}

}  // namespace kvcanary::auditor
