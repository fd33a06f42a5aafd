// Reading a WAL-mode SQLite file that a reviewer was handed: a killed
// writer's `.db` and `-wal` without the `-shm`, perhaps read-only, in a
// read-only directory. SQLite opens a WAL database read-only only when its
// -shm exists, or can be created beside it, or with immutable=1 — which
// ignores the WAL and so the rows committed there (sqlite.org/wal.html,
// "Read-Only Databases"). Such a pair is therefore copied into a private
// directory (mode 0700) and opened there, where SQLite rebuilds the -shm:
// nothing is ever written beside the reviewer's files.
#ifndef KVCANARY_STORAGE_WAL_COPY_H_
#define KVCANARY_STORAGE_WAL_COPY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvcanary::storage {

// Where to open `path` for reading. Removes its private copy, if it made
// one, when destroyed: keep it alive as long as the database is open.
// Not thread-safe; owned by the reader that opened the file.
class WalCopy {
 public:
  // `path` itself, unless its -wal exists without a -shm and no writer
  // holds it (`writer_active` false): then a private copy of both, in a
  // fresh directory under $TMPDIR. Errors name the file that could not be
  // copied (kNotFound, kPermissionDenied, kInternal).
  static absl::StatusOr<std::unique_ptr<WalCopy>> For(const std::string& path,
                                                      bool writer_active);
  ~WalCopy();
  WalCopy(const WalCopy&) = delete;
  WalCopy& operator=(const WalCopy&) = delete;

  // The file to open: the copy, or the original.
  const std::string& open_path() const { return open_path_; }
  bool copied() const { return !dir_.empty(); }
  // `s` with the copy's path replaced by the original's, so that errors
  // name the file the reviewer holds.
  absl::Status Rename(const absl::Status& s) const;

 private:
  WalCopy(std::string path, std::string dir, std::string open_path)
      : path_(std::move(path)),
        dir_(std::move(dir)),
        open_path_(std::move(open_path)) {}

  std::string path_;       // the reviewer's file
  std::string dir_;        // the private directory; "" when not copied
  std::string open_path_;  // dir_/<name>, or path_
};

// True if `path` is a SQLite file whose header says WAL mode (bytes 18 and
// 19 are 2) and `path`-wal does not exist: whatever a writer committed
// since the last checkpoint is in a file the reader does not have.
bool WalMissing(const std::string& path);

}  // namespace kvcanary::storage

#endif  // KVCANARY_STORAGE_WAL_COPY_H_
