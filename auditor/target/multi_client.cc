#include "auditor/target/multi_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "auditor/target/http_client.h"
#include "common/check.h"

namespace kvcanary::auditor {
namespace {

using Clock = std::chrono::steady_clock;

struct Transfer {
  ProbeRequest request;
  ProbeResponse response;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  Clock::time_point start;
  bool got_byte = false;
  bool too_big = false;
  size_t max_bytes = 0;
  char error[CURL_ERROR_SIZE] = {0};
};

size_t OnData(char* data, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  if (!t->got_byte) {
    t->got_byte = true;
    t->response.first_byte = absl::FromChrono(Clock::now() - t->start);
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    // An error answer is read whole: only a completion is hung up on.
    if (t->request.hang_up_at_first_byte && code == 200) {
      t->response.hung_up = true;
      return 0;  // curl closes the connection
    }
  }
  if (t->response.body.size() + size * n > t->max_bytes) {
    t->too_big = true;
    return 0;
  }
  t->response.body.append(data, size * n);
  return size * n;
}

size_t OnHeader(char* data, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  absl::string_view line(data, size * n);
  if (absl::StartsWith(line, "HTTP/")) {
    t->response.headers.clear();  // a new response (after a 100 Continue)
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || colon == 0) return size * n;
  t->response.headers[absl::AsciiStrToLower(line.substr(0, colon))] =
      std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  return size * n;
}

// Adds a transfer of `request` to `multi`; it owns itself (through
// CURLOPT_PRIVATE) until FinishTransfer.
void StartTransfer(CURLM* multi, ProbeRequest request, size_t max_bytes) {
  auto t = std::make_unique<Transfer>();
  t->request = std::move(request);
  t->response.id = t->request.id;
  t->max_bytes = max_bytes;
  CURL* e = curl_easy_init();
  CHECK(e != nullptr) << "curl_easy_init failed";
  t->easy = e;
  curl_easy_setopt(e, CURLOPT_URL, t->request.url.c_str());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
  // A hang-up on purpose is the transfer's timeout (checked in
  // FinishTransfer).
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(std::min(
                       t->request.timeout, t->request.hang_up_after))));
  curl_easy_setopt(e, CURLOPT_USERAGENT, "kvcanary-auditor");
  for (const std::string& h : t->request.headers) {
    t->headers = curl_slist_append(t->headers, h.c_str());
  }
  if (!t->request.body.empty()) {
    t->headers =
        curl_slist_append(t->headers, "Content-Type: application/json");
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE,
                     static_cast<long>(t->request.body.size()));
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->request.body.data());
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnData);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  t->start = Clock::now();
  CHECK_EQ(curl_multi_add_handle(multi, e), CURLM_OK);
  t.release();  // owned through CURLOPT_PRIVATE until done
}

// Removes the finished transfer of `msg` from `multi`, frees it and
// returns its response.
ProbeResponse FinishTransfer(CURLM* multi, CURLMsg* msg) {
  Transfer* raw = nullptr;
  curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &raw);
  std::unique_ptr<Transfer> t(raw);
  t->response.total = absl::FromChrono(Clock::now() - t->start);
  const CURLcode rc = msg->data.result;
  if (rc == CURLE_OPERATION_TIMEDOUT &&
      t->request.hang_up_after < t->request.timeout) {
    t->response.hung_up = true;
  }
  if (t->response.hung_up) {
    t->response.transport = absl::CancelledError(
        absl::StrCat(t->request.url, ": hung up on purpose"));
  } else if (rc == CURLE_OK) {
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    t->response.status = static_cast<int>(code);
  } else if (t->too_big) {
    t->response.transport = absl::ResourceExhaustedError(absl::StrCat(
        t->request.url, ": response over ", t->max_bytes, " bytes"));
  } else {
    t->response.transport = StatusFromCurl(rc, t->request.url, t->error);
  }
  curl_multi_remove_handle(multi, t->easy);
  curl_easy_cleanup(t->easy);
  curl_slist_free_all(t->headers);
  return std::move(t->response);
}

}  // namespace

MultiClient::MultiClient(int max_concurrent, size_t max_response_bytes)
    : max_concurrent_(max_concurrent), max_response_bytes_(max_response_bytes) {
  CHECK_GT(max_concurrent, 0);
}

void MultiClient::Run(const std::function<std::optional<ProbeRequest>()>& next,
                      const std::function<void(ProbeResponse)>& on_done,
                      const std::function<bool()>& done) {
  CURLM* multi = curl_multi_init();
  CHECK(multi != nullptr) << "curl_multi_init failed";
  int in_flight = 0;
  while (true) {
    while (in_flight < max_concurrent_) {
      std::optional<ProbeRequest> req = next();
      if (!req.has_value()) break;
      StartTransfer(multi, *std::move(req), max_response_bytes_);
      ++in_flight;
    }
    if (in_flight == 0) {
      if (done()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    int running = 0;
    curl_multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      ProbeResponse response = FinishTransfer(multi, msg);
      --in_flight;
      on_done(std::move(response));
    }
    if (in_flight > 0) curl_multi_poll(multi, nullptr, 0, 10, nullptr);
  }
  curl_multi_cleanup(multi);
}

}  // namespace kvcanary::auditor
