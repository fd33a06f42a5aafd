// A fresh path under the test's temp dir. The process id alone is not
// unique: CTest runs each test in a process of its own, and on a machine
// that starts thousands a pid comes round again while an earlier test's
// files (a rotated log, a database) are still there; a random part makes
// each path new.
#ifndef KVCANARY_TESTS_TEMP_PATH_H_
#define KVCANARY_TESTS_TEMP_PATH_H_

#include <unistd.h>

#include <string>

#include "common/random.h"
#include "gtest/gtest.h"

namespace kvcanary::testing_paths {

// "<TempDir>/<prefix>-<pid>-<16 hex>-<name>".
inline std::string UniqueTempPath(const std::string& prefix,
                                  const std::string& name) {
  return ::testing::TempDir() + "/" + prefix + "-" + std::to_string(getpid()) +
         "-" + RandomHex(8) + "-" + name;
}

}  // namespace kvcanary::testing_paths

#endif  // KVCANARY_TESTS_TEMP_PATH_H_
