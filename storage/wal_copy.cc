#include "storage/wal_copy.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace kvcanary::storage {
namespace {

namespace fs = std::filesystem;

bool Exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

absl::Status CopyError(const std::string& from, const std::error_code& ec) {
  const std::string what = absl::StrCat(
      from,
      ": cannot copy it to read its write-ahead log privately: ", ec.message());
  if (ec == std::errc::no_such_file_or_directory) {
    return absl::NotFoundError(what);
  }
  if (ec == std::errc::permission_denied) {
    return absl::PermissionDeniedError(what);
  }
  return absl::InternalError(what);
}

// Copies `from` to `to` as a file only its owner reads and writes: SQLite
// opens the copy's -wal read-write to rebuild the -shm from it.
absl::Status CopyPrivately(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::none, ec);
  if (!ec) {
    fs::permissions(to, fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::replace, ec);
  }
  return ec ? CopyError(from, ec) : absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<WalCopy>> WalCopy::For(const std::string& path,
                                                      bool writer_active) {
  // A live writer keeps its -shm; without one, the files are at rest and
  // a copy reads what was committed.
  if (writer_active || !Exists(path + "-wal") || Exists(path + "-shm")) {
    return std::unique_ptr<WalCopy>(new WalCopy(path, "", path));
  }
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec);  // $TMPDIR or /tmp
  std::string tmpl =
      ((ec ? fs::path("/tmp") : tmp) / "kvcanary-wal-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {  // mode 0700
    return absl::InternalError(absl::StrCat(
        tmpl, ": cannot create a private directory: ", std::strerror(errno)));
  }
  const std::string copy =
      (fs::path(tmpl) / fs::path(path).filename()).string();
  // Owned from here: the destructor removes the directory on any error.
  std::unique_ptr<WalCopy> out(new WalCopy(path, tmpl, copy));
  for (const char* suffix : {"", "-wal"}) {
    absl::Status s = CopyPrivately(path + suffix, copy + suffix);
    if (!s.ok()) return s;
  }
  return out;
}

WalCopy::~WalCopy() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);  // best effort: it lies under $TMPDIR
}

absl::Status WalCopy::Rename(const absl::Status& s) const {
  if (s.ok() || !copied()) return s;
  return absl::Status(s.code(),
                      absl::StrReplaceAll(s.message(), {{open_path_, path_}}));
}

bool WalMissing(const std::string& path) {
  if (Exists(path + "-wal")) return false;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char header[20] = {};
  const ssize_t n = pread(fd, header, sizeof(header), 0);
  close(fd);
  // "SQLite format 3\0", then the write and read versions at 18 and 19.
  return n == static_cast<ssize_t>(sizeof(header)) &&
         std::memcmp(header, "SQLite format 3", 16) == 0 && header[18] == 2 &&
         header[19] == 2;
}

}  // namespace kvcanary::storage
