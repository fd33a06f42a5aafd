// Whole-file read and atomic replace: contents byte for byte, errors that
// name the path with the right code, no temporary file left behind.
#include "common/file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvcanary {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/kvcanary_file_XXXXXX";
    dir_ = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

TEST(FileTest, WrittenBytesReadBackExactly) {
  TempDir d;
  std::string bytes = "line one\n";
  bytes.push_back('\0');
  bytes += std::string(200000, '\xff');  // several read() chunks
  ASSERT_TRUE(WriteFileAtomically(d.Path("f"), bytes, 0644).ok());
  absl::StatusOr<std::string> read = ReadFile(d.Path("f"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  ASSERT_TRUE(WriteFileAtomically(d.Path("empty"), "", 0644).ok());
  EXPECT_EQ(ReadFile(d.Path("empty")).value_or("x"), "");
}

TEST(FileTest, ReplacingKeepsOnlyTheNewContentsAndNoTemporaryFile) {
  TempDir d;
  ASSERT_TRUE(
      WriteFileAtomically(d.Path("f"), "a much longer old text", 0644).ok());
  ASSERT_TRUE(WriteFileAtomically(d.Path("f"), "new", 0644).ok());
  EXPECT_EQ(ReadFile(d.Path("f")).value_or(""), "new");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(d.dir())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "f");
  }
  EXPECT_EQ(files, 1);
}

TEST(FileTest, ModeIsTheOneAsked) {
  TempDir d;
  const mode_t old_mask = umask(022);
  ASSERT_TRUE(WriteFileAtomically(d.Path("key"), "secret", 0600).ok());
  ASSERT_TRUE(WriteFileAtomically(d.Path("pub"), "public", 0644).ok());
  umask(old_mask);
  struct stat st;
  ASSERT_EQ(stat(d.Path("key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(d.Path("pub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(FileTest, MissingFileIsNotFoundNamingThePath) {
  TempDir d;
  const absl::StatusOr<std::string> read = ReadFile(d.Path("none"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(read.status().message(), d.Path("none")))
      << read.status();
  const absl::Status write =
      WriteFileAtomically(d.Path("no/such/dir/f"), "x", 0644);
  EXPECT_EQ(write.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(write.message(), d.Path("no/such/dir/f")))
      << write;
}

TEST(FileTest, DirectoryIsNotReadAsAFile) {
  TempDir d;
  const absl::StatusOr<std::string> read = ReadFile(d.dir());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(read.status().message(), d.dir()));
}

TEST(FileTest, UnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every file";
  TempDir d;
  ASSERT_TRUE(WriteFileAtomically(d.Path("f"), "x", 0000).ok());
  EXPECT_EQ(ReadFile(d.Path("f")).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(FileTest, ReadOnlyDirectoryRefusesTheWriteAndKeepsTheOldFile) {
  if (geteuid() == 0) GTEST_SKIP() << "root writes in every directory";
  TempDir d;
  ASSERT_TRUE(WriteFileAtomically(d.Path("f"), "old", 0644).ok());
  ASSERT_EQ(chmod(d.dir().c_str(), 0555), 0);
  const absl::Status write = WriteFileAtomically(d.Path("f"), "new", 0644);
  chmod(d.dir().c_str(), 0755);
  EXPECT_EQ(write.code(), absl::StatusCode::kPermissionDenied) << write;
  EXPECT_EQ(ReadFile(d.Path("f")).value_or(""), "old");
}

TEST(FileTest, ReadsProcFilesThatReportSizeZero) {
  const absl::StatusOr<std::string> read = ReadFile("/proc/self/status");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(absl::StrContains(*read, "Pid:"));
}

}  // namespace
}  // namespace kvcanary
