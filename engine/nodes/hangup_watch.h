// Notices clients that hang up while their request waits on another node —
// the router's client while the decode node has not answered yet, the
// router (the decode node's client) while a prefill node computes and ships
// the prompt's K/V — so the request is given up at once and its pages freed,
// as vLLM aborts a request whose client disconnected, rather than when the
// wait ends. This is also the path abort-transfer-race lives on: an abort
// while the prompt's K/V is still arriving (docs/faults.md).
//
// One thread per watch polls every watched connection each `interval` (a
// poll() each: http::Request::is_connection_closed).
//
// Thread-safe.
#ifndef KVCANARY_ENGINE_NODES_HANGUP_WATCH_H_
#define KVCANARY_ENGINE_NODES_HANGUP_WATCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvcanary::engine {

class HangupWatch {
 public:
  explicit HangupWatch(absl::Duration interval = absl::Milliseconds(5));
  ~HangupWatch();
  HangupWatch(const HangupWatch&) = delete;
  HangupWatch& operator=(const HangupWatch&) = delete;

  // While it lives, `gone` is polled; the first time it says true,
  // `on_gone` runs, once, on the watch's thread (it must not block: stop a
  // client, set a flag). Once the Scope is destroyed neither runs again.
  class Scope {
   public:
    Scope(HangupWatch* watch, uint64_t id) : watch_(watch), id_(id) {}
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    // Whether on_gone ran.
    bool fired() const;

   private:
    HangupWatch* const watch_;
    const uint64_t id_;
  };
  // A null or empty `gone` is never polled (the Scope does nothing).
  Scope Watch(std::function<bool()> gone, std::function<void()> on_gone);

 private:
  struct Entry {
    std::function<bool()> gone;
    std::function<void()> on_gone;
    bool fired = false;
  };
  void Loop();

  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvcanary::engine

#endif  // KVCANARY_ENGINE_NODES_HANGUP_WATCH_H_
