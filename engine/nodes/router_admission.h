// What the router's admission (router_admission.cc) hands the relay: an
// admitted request, holding its places in the in-flight counts. Internal
// to the router's files (engine/nodes/router*.cc).
#ifndef KVCANARY_ENGINE_NODES_ROUTER_ADMISSION_H_
#define KVCANARY_ENGINE_NODES_ROUTER_ADMISSION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/ids.h"
#include "engine/nodes/openai_request.h"
#include "engine/nodes/router.h"

namespace kvcanary::engine {

// An admitted request: what the relay needs, and its place in the in-flight
// counts, released when the last holder (the handler, or the streaming
// provider) lets go.
struct Router::Admitted {
  // `count` places in each (one per choice).
  class InFlight {
   public:
    InFlight(std::atomic<int>* total, std::atomic<int>* tenant, int count)
        : total_(total), tenant_(tenant), count_(count) {}
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;
    ~InFlight() {
      total_->fetch_sub(count_);
      tenant_->fetch_sub(count_);
    }

   private:
    std::atomic<int>* total_;
    std::atomic<int>* tenant_;
    const int count_;
  };

  CompletionRequest request;
  TenantId tenant;
  std::vector<int> prompt;
  uint64_t request_id = 0;  // the answer's; choice 0's
  // Each choice is a sequence of its own, under its own id.
  std::vector<uint64_t> choice_ids;
  std::unique_ptr<InFlight> in_flight;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_ROUTER_ADMISSION_H_
