// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status and absl::StatusOr.
// Abseil 20220623 ships neither, so they are written once here.
#ifndef KVCANARY_COMMON_STATUS_MACROS_H_
#define KVCANARY_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVC_STATUS_CONCAT_INNER(a, b) a##b
#define KVC_STATUS_CONCAT(a, b) KVC_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                                       \
  do {                                                              \
    ::absl::Status _kvc_status = (expr);                            \
    if (__builtin_expect(!_kvc_status.ok(), 0)) return _kvc_status; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, Foo()); or ASSIGN_OR_RETURN(x, Foo());
#define ASSIGN_OR_RETURN(lhs, expr)                                           \
  KVC_ASSIGN_OR_RETURN_IMPL(KVC_STATUS_CONCAT(_kvc_statusor_, __LINE__), lhs, \
                            expr)

#define KVC_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)               \
  auto statusor = (expr);                                            \
  if (__builtin_expect(!statusor.ok(), 0)) return statusor.status(); \
  lhs = std::move(statusor).value()

#endif  // KVCANARY_COMMON_STATUS_MACROS_H_
