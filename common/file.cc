#include "common/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvcanary {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(message);
  }
  if (err == EISDIR) return absl::FailedPreconditionError(message);
  return absl::InternalError(message);
}

// Closes `fd` on every path out of a function.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }
  // Closes now; the close's own error (a deferred write error on some
  // file systems) is the caller's to report.
  int Close() {
    const int rc = close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus(errno, path);
  std::string out;
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, path);
  if (S_ISDIR(st.st_mode)) return ErrnoStatus(EISDIR, path);
  // Files in /proc report size 0 and still have contents: read to EOF.
  if (st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, path);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, int mode) {
  static std::atomic<uint64_t> next_tmp{0};
  const std::string tmp =
      absl::StrCat(path, ".tmp.", getpid(), ".", next_tmp.fetch_add(1));
  Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
             static_cast<mode_t>(mode)));
  if (fd.get() < 0) return ErrnoStatus(errno, tmp);
  const auto fail = [&tmp](int err, const std::string& what) {
    unlink(tmp.c_str());
    return ErrnoStatus(err, what);
  };
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n =
        write(fd.get(), contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno, tmp);
    done += static_cast<size_t>(n);
  }
  if (fsync(fd.get()) != 0 || fd.Close() != 0) return fail(errno, tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return fail(errno, path);
  return absl::OkStatus();
}

}  // namespace kvcanary
