// Private temporary directories under $TMPDIR (common/temp_dir.h).
#include "common/temp_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvcanary {

std::string TempRoot() {
  const char* env = std::getenv("TMPDIR");
  std::string root = env != nullptr && env[0] != '\0' ? env : "/tmp";
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

absl::StatusOr<TempDir> TempDir::Create(absl::string_view prefix) {
  std::string tmpl = absl::StrCat(TempRoot(), "/", prefix, "-XXXXXX");
  std::vector<char> buffer(tmpl.begin(), tmpl.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a temporary directory ", tmpl, ": ",
                     std::strerror(errno)));
  }
  return TempDir(std::string(buffer.data()));
}

TempDir::TempDir(TempDir&& other) noexcept
    : path_(std::exchange(other.path_, std::string())) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::exchange(other.path_, std::string());
  }
  return *this;
}

TempDir::~TempDir() { Remove(); }

std::string TempDir::File(absl::string_view name) const {
  return absl::StrCat(path_, "/", name);
}

void TempDir::Remove() {
  if (path_.empty()) return;
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
  path_.clear();
}

std::string TempDir::Release() { return std::exchange(path_, std::string()); }

}  // namespace kvcanary
