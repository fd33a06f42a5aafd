// Private temporary directories: where the process's files that outlive no
// run go (generated secrets, scratch tenants files, test databases). The
// root is $TMPDIR where it is set, as every POSIX tool takes it, else /tmp;
// a TempDir is created there with mode 0700 and removed with everything in
// it when the object goes, so nothing is left behind on an error path.
#ifndef KVCANARY_COMMON_TEMP_DIR_H_
#define KVCANARY_COMMON_TEMP_DIR_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary {

// $TMPDIR when set and not empty, else "/tmp"; never with a trailing '/'.
std::string TempRoot();

// A fresh directory "<TempRoot()>/<prefix>-XXXXXX" (mkdtemp: mode 0700,
// unique), removed recursively by the destructor. Movable, not copyable.
// Not thread-safe; owned by whoever created it.
class TempDir {
 public:
  // kInternal naming the path when the directory cannot be made.
  static absl::StatusOr<TempDir> Create(absl::string_view prefix);
  TempDir() = default;
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  // Empty for a default-constructed or moved-from object.
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(absl::string_view name) const;
  // Removes the directory now (what the destructor does); idempotent.
  void Remove();
  // Keeps the directory: the destructor leaves it where it is.
  std::string Release();

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_TEMP_DIR_H_
