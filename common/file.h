// Whole files: read one into a string, or replace one so that a reader sees
// the old contents or the new, never a mix (keys, transparency-log
// checkpoints, bundles, reports, status files).
#ifndef KVCANARY_COMMON_FILE_H_
#define KVCANARY_COMMON_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvcanary {

// The whole file, bytes as they are. Errors name the path: kNotFound when it
// does not exist, kPermissionDenied when it may not be read,
// kFailedPrecondition for a directory, kInternal for any other failure.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `contents` to a temporary file beside `path` with permission `mode`
// (0600 for a private key, 0644 for what others may read), fsyncs it and
// renames it over `path`: a reader or a crash sees the old file or the new,
// whole. Errors name the file (kNotFound for a missing directory,
// kPermissionDenied, kInternal); on error no temporary file is left.
// Thread-safe: concurrent writers of one path each write their own
// temporary file, and the last rename wins.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, int mode);

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_FILE_H_
