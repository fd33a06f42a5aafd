// Follows one engine's KV-cache event stream into a Ledger: a ZeroMQ SUB
// socket on the engine's PUB endpoint, sequence numbers checked message by
// message, a gap asked again of the engine's replay socket (ROUTER) where it
// has one and recorded as missing for good where it cannot be, a publisher
// restart (sequence numbers going back) recorded as one. The stream carries
// every tenant's token ids: nothing of it is kept but what the Ledger keeps
// (hashes and counts), and it is never logged.
#ifndef KVCANARY_AUDITOR_KV_EVENTS_SUBSCRIBER_H_
#define KVCANARY_AUDITOR_KV_EVENTS_SUBSCRIBER_H_

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "auditor/kv_events/ledger.h"

namespace kvcanary::auditor::kv_events {

struct SubscriberOptions {
  std::string endpoint;         // the PUB socket, tcp://HOST:PORT
  std::string replay_endpoint;  // its replay ROUTER; "" when it has none
  std::string topic;            // subscription prefix; "": every message
  // ZMQ PLAIN credentials (our engine's streams require them: user
  // "kvcanary", the nodes' trace token); "": none (vLLM, SGLang).
  std::string password;
  std::string username = "kvcanary";
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration replay_timeout = absl::Seconds(1);
  int pairs = 3;  // the kv_events detector's probe pairs on this stream
  // The probes ask the engine to report every block of their prompts, hits
  // included (vLLM's per-request kv_cache_report_mode "full", vllm#45261):
  // a hit then shows as B's blocks under A's hashes, not as silence.
  bool report_full = false;
};

// "tcp://HOST:PORT[,replay=tcp://HOST:PORT][,topic=T][,pairs=N]
// [,report=full]" (the --kv-events flag). kInvalidArgument naming what is
// wrong.
absl::StatusOr<SubscriberOptions> ParseKvEventsFlag(absl::string_view flag);
// The same, with the PLAIN password read from `password_file` (the nodes'
// trace token file; "": none); an empty `flag` gives empty options.
absl::StatusOr<SubscriberOptions> KvEventsFromFlags(
    absl::string_view flag, const std::string& password_file);

class Subscriber {
 public:
  Subscriber(SubscriberOptions options, Ledger* ledger);
  ~Subscriber();  // Stop()
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Connects and waits for the handshake: kUnavailable if the publisher
  // does not answer in time, kPermissionDenied if it refuses our
  // credentials (or wants some we lack). Then follows the stream on a
  // thread of its own until Stop().
  absl::Status Start();
  void Stop();

  // Waits until no message has arrived for `quiet` (at most `max`): lets
  // the events of a request just answered arrive before a window closes.
  void WaitQuiet(absl::Duration quiet, absl::Duration max) const;
  // Brings the ledger up to what the publisher has sent: asks the replay
  // socket for everything after the last message received and ingests it,
  // so a message dropped at a window's end lands in that window, not in
  // the next (where its gap would only be found with the next message).
  // false without a replay socket, or when it did not answer in time (a
  // loss then shows as a gap in the next window, which makes it not whole).
  bool Sync();
  const SubscriberOptions& options() const { return options_; }

 private:
  struct Sockets;
  void Loop();
  // One PUB message: its sequence number checked, a gap recovered first.
  void OnMessage(const std::vector<std::string>& frames);
  // Asks the replay socket for messages [from, to] and ingests what comes;
  // records the gap as recovered or not.
  void Recover(int64_t from, int64_t to);
  // Messages [from, to] the replay socket resends; nullopt if it could not
  // be asked or did not finish its answer in time.
  std::optional<std::map<int64_t, std::string>> Replay(int64_t from,
                                                       int64_t to);
  // Sync()'s work, on the loop's thread.
  bool CatchUp();
  void Ingest(int64_t seq, const std::string& payload);

  const SubscriberOptions options_;
  Ledger* const ledger_;
  std::unique_ptr<Sockets> sockets_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> last_message_us_{0};
  absl::Mutex sync_mu_;
  int64_t sync_asked_ ABSL_GUARDED_BY(sync_mu_) = 0;
  int64_t sync_done_ ABSL_GUARDED_BY(sync_mu_) = 0;
  bool sync_ok_ ABSL_GUARDED_BY(sync_mu_) = false;
};

}  // namespace kvcanary::auditor::kv_events

#endif  // KVCANARY_AUDITOR_KV_EVENTS_SUBSCRIBER_H_
