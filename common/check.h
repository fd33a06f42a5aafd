// CHECK macros for invariants. Abseil 20220623 has no absl/log, so these are
// written once here. A failed CHECK prints the condition, the file and line,
// and aborts: impossible states crash loudly. Untrusted input never reaches a
// CHECK; it gets an absl::Status instead.
#ifndef KVCANARY_COMMON_CHECK_H_
#define KVCANARY_COMMON_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace kvcanary::internal {

[[noreturn]] inline void CheckFailed(const char* file, int line,
                                     const char* condition,
                                     const std::string& message) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s %s\n", file, line, condition,
               message.c_str());
  std::fflush(stderr);
  std::abort();
}

// Collects an optional streamed message: CHECK(x) << "why";
class CheckMessage {
 public:
  CheckMessage(const char* file, int line, const char* condition)
      : file_(file), line_(line), condition_(condition) {}
  ~CheckMessage() { CheckFailed(file_, line_, condition_, stream_.str()); }
  template <typename T>
  CheckMessage& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  const char* file_;
  int line_;
  const char* condition_;
  std::ostringstream stream_;
};

}  // namespace kvcanary::internal

#define CHECK(condition)                  \
  if (__builtin_expect(!!(condition), 1)) \
    ;                                     \
  else                                    \
    ::kvcanary::internal::CheckMessage(__FILE__, __LINE__, #condition)

#define CHECK_EQ(a, b) CHECK((a) == (b)) << (a) << " vs " << (b) << " "
#define CHECK_NE(a, b) CHECK((a) != (b)) << (a) << " vs " << (b) << " "
#define CHECK_LT(a, b) CHECK((a) < (b)) << (a) << " vs " << (b) << " "
#define CHECK_LE(a, b) CHECK((a) <= (b)) << (a) << " vs " << (b) << " "
#define CHECK_GT(a, b) CHECK((a) > (b)) << (a) << " vs " << (b) << " "
#define CHECK_GE(a, b) CHECK((a) >= (b)) << (a) << " vs " << (b) << " "
#define CHECK_OK(expr)                                  \
  do {                                                  \
    const ::absl::Status _kvc_check_status = (expr);    \
    CHECK(_kvc_check_status.ok()) << _kvc_check_status; \
  } while (0)

#endif  // KVCANARY_COMMON_CHECK_H_
