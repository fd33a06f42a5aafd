#include "engine/nodes/access_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using ordered_json = nlohmann::ordered_json;

template <typename T>
ordered_json OrNull(const std::optional<T>& v) {
  return v.has_value() ? ordered_json(*v) : ordered_json(nullptr);
}

// Milliseconds rounded to 3 decimals.
double Ms(double ms) { return std::round(ms * 1000.0) / 1000.0; }

}  // namespace

std::string AccessRecordJson(const AccessRecord& r) {
  ordered_json j;
  j["ts"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", r.start, absl::UTCTimeZone());
  j["request_id"] = OrNull(r.request_id);
  j["tenant"] = OrNull(r.tenant);
  j["endpoint"] = r.endpoint;
  j["status"] = r.status;
  j["prompt_tokens"] = OrNull(r.prompt_tokens);
  j["completion_tokens"] = r.completion_tokens;
  j["cached_tokens"] = r.cached_tokens;
  j["ttft_ms"] =
      r.ttft_ms.has_value() ? ordered_json(Ms(*r.ttft_ms)) : ordered_json();
  j["total_ms"] = Ms(r.total_ms);
  j["finish_reason"] = OrNull(r.finish_reason);
  j["stream"] = r.stream;
  j["prefill_outcome"] = OrNull(r.prefill_outcome);
  j["decode_outcome"] = OrNull(r.decode_outcome);
  j["reason"] = OrNull(r.reason);
  // Node messages are ASCII; replace rather than throw on anything else.
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(
    const AccessLogOptions& options) {
  if (options.path.empty() || options.max_bytes < 1 || options.keep < 0) {
    return absl::InvalidArgumentError(
        "access log: needs a path, max bytes >= 1 and keep >= 0");
  }
  std::unique_ptr<AccessLog> log(new AccessLog(options));
  absl::MutexLock lock(&log->mu_);
  absl::Status opened = log->OpenFile();
  if (!opened.ok()) return opened;
  return log;
}

AccessLog::~AccessLog() {
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) close(fd_);
}

absl::Status AccessLog::OpenFile() {
  fd_ = open(options_.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
             0640);
  if (fd_ < 0) {
    return absl::UnavailableError(absl::StrCat(
        "access log ", options_.path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  size_bytes_ = fstat(fd_, &st) == 0 ? st.st_size : 0;
  return absl::OkStatus();
}

void AccessLog::Rotate() {
  close(fd_);
  fd_ = -1;
  const std::string& base = options_.path;
  if (options_.keep == 0) {
    if (unlink(base.c_str()) != 0) ++write_errors_;
  } else {
    // FILE.<keep-1> -> FILE.<keep>, ..., FILE -> FILE.1 (overwriting the
    // oldest). A missing one in the chain is not an error.
    for (int k = options_.keep - 1; k >= 0; --k) {
      const std::string from = k == 0 ? base : absl::StrCat(base, ".", k);
      const std::string to = absl::StrCat(base, ".", k + 1);
      if (std::rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT) {
        ++write_errors_;
      }
    }
  }
  if (!OpenFile().ok()) ++write_errors_;
}

void AccessLog::Write(const AccessRecord& record) {
  const std::string line = AccessRecordJson(record) + "\n";
  absl::MutexLock lock(&mu_);
  if (size_bytes_ > 0 &&
      size_bytes_ + static_cast<int64_t>(line.size()) > options_.max_bytes) {
    Rotate();
  }
  if (fd_ < 0 && !OpenFile().ok()) {
    ++write_errors_;
    return;
  }
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ++write_errors_;
      break;
    }
    done += static_cast<size_t>(n);
  }
  size_bytes_ += static_cast<int64_t>(done);
}

uint64_t AccessLog::write_errors() const {
  absl::MutexLock lock(&mu_);
  return write_errors_;
}

}  // namespace kvcanary::engine
