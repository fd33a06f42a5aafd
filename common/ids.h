// Id types of the domain. Each id has its own type so a page id can never be
// passed where a request id is expected.
#ifndef KVCANARY_COMMON_IDS_H_
#define KVCANARY_COMMON_IDS_H_

#include <cstdint>
#include <functional>
#include <ostream>

namespace kvcanary {

template <typename Tag, typename Rep>
class StrongId {
 public:
  using rep_type = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }
  friend constexpr bool operator==(StrongId a, StrongId b) {
    return a.value_ == b.value_;
  }
  friend constexpr bool operator!=(StrongId a, StrongId b) {
    return a.value_ != b.value_;
  }
  friend constexpr bool operator<(StrongId a, StrongId b) {
    return a.value_ < b.value_;
  }
  friend std::ostream& operator<<(std::ostream& os, StrongId id) {
    return os << +id.value_;
  }
  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }

 private:
  Rep value_ = 0;
};

// Tenant 0 is "nobody": the writer of a page that was never written.
using TenantId = StrongId<struct TenantIdTag, uint32_t>;
// Request 0 is "no request".
using RequestId = StrongId<struct RequestIdTag, uint64_t>;
using PageId = StrongId<struct PageIdTag, uint32_t>;
// Bumped by the page pool on every allocation of a page; 0 = never allocated.
using PageGeneration = StrongId<struct PageGenerationTag, uint32_t>;

inline constexpr TenantId kNoTenant{0};
inline constexpr RequestId kNoRequest{0};

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_IDS_H_
