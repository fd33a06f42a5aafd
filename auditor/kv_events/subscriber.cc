#include "auditor/kv_events/subscriber.h"

#include <zmq.h>

#include <cstring>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "auditor/trace/follower.h"
#include "common/check.h"
#include "common/clock.h"
#include "zmq.hpp"
#include "zmq_addon.hpp"

namespace kvcanary::auditor::kv_events {
namespace {

absl::Status CheckEndpoint(absl::string_view what, absl::string_view ep) {
  if (!absl::StartsWith(ep, "tcp://") && !absl::StartsWith(ep, "ipc://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kv-events: ", what, " '", ep, "' is not tcp://HOST:PORT"));
  }
  return absl::OkStatus();
}

std::vector<std::string> Frames(std::vector<zmq::message_t>& msgs) {
  std::vector<std::string> out;
  out.reserve(msgs.size());
  for (zmq::message_t& m : msgs) out.push_back(m.to_string());
  return out;
}

// ZeroMQ drops a connection that sends a message over this instead of
// buffering it (what it carried shows here as a gap): the decoder's own
// bound on a batch.
constexpr int64_t kMaxMessageBytes = int64_t{64} << 20;

void SetCommon(zmq::socket_t& s, const SubscriberOptions& o) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
  if (!o.password.empty()) {
    s.set(zmq::sockopt::plain_username, o.username);
    s.set(zmq::sockopt::plain_password, o.password);
  }
}

// Waits for the handshake on a socket being monitored at `monitor`.
absl::Status AwaitHandshake(zmq::socket_t& monitor, absl::Duration timeout,
                            const std::string& endpoint) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    zmq::pollitem_t item{monitor.handle(), 0, ZMQ_POLLIN, 0};
    const long ms = std::max<long>(
        1,
        static_cast<long>(absl::ToInt64Milliseconds(deadline - absl::Now())));
    zmq::poll(&item, 1, std::chrono::milliseconds(ms));
    if ((item.revents & ZMQ_POLLIN) == 0) continue;
    std::vector<zmq::message_t> ev;
    if (!zmq::recv_multipart(monitor, std::back_inserter(ev))) continue;
    if (ev.empty() || ev[0].size() < 2) continue;
    uint16_t event = 0;
    std::memcpy(&event, ev[0].data(), sizeof(event));
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) return absl::OkStatus();
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH ||
        event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
        event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      return absl::PermissionDeniedError(absl::StrCat(
          "kv events ", endpoint,
          ": the publisher refused the handshake (credentials: a stream that "
          "requires them needs the right --trace-token-file; one that does "
          "not must get none)"));
    }
  }
  return absl::UnavailableError(absl::StrCat("kv events ", endpoint,
                                             ": no publisher answered in ",
                                             absl::FormatDuration(timeout)));
}

}  // namespace

absl::StatusOr<SubscriberOptions> ParseKvEventsFlag(absl::string_view flag) {
  SubscriberOptions o;
  bool first = true;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    if (first) {
      o.endpoint = std::string(part);
      first = false;
      continue;
    }
    if (absl::ConsumePrefix(&part, "replay=")) {
      o.replay_endpoint = std::string(part);
      if (auto s = CheckEndpoint("replay", part); !s.ok()) return s;
    } else if (absl::ConsumePrefix(&part, "topic=")) {
      o.topic = std::string(part);
    } else if (part == "report=full") {
      o.report_full = true;
    } else if (absl::ConsumePrefix(&part, "pairs=")) {
      if (!absl::SimpleAtoi(part, &o.pairs) || o.pairs < 1 || o.pairs > 1000) {
        return absl::InvalidArgumentError(
            absl::StrCat("--kv-events: pairs=", part, " is not 1 to 1000"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kv-events: unknown part '", part,
          "' (tcp://HOST:PORT[,replay=tcp://HOST:PORT][,topic=T][,pairs=N]"
          "[,report=full])"));
    }
  }
  if (auto s = CheckEndpoint("endpoint", o.endpoint); !s.ok()) return s;
  return o;
}

absl::StatusOr<SubscriberOptions> KvEventsFromFlags(
    absl::string_view flag, const std::string& password_file) {
  if (flag.empty()) return SubscriberOptions{};
  absl::StatusOr<SubscriberOptions> o = ParseKvEventsFlag(flag);
  if (!o.ok()) return o.status();
  absl::StatusOr<std::string> password = ReadTraceToken(password_file);
  if (!password.ok()) return password.status();
  o->password = *std::move(password);
  return o;
}

struct Subscriber::Sockets {
  zmq::context_t context{1};
  zmq::socket_t sub{context, zmq::socket_type::sub};
  std::unique_ptr<zmq::socket_t> replay;  // connected on first use
  bool have_seq = false;
  int64_t expected = 0;
  // What the last Sync() took from the replay socket: sequence -> a hash
  // of the payload, to know the same message again on the SUB socket.
  std::map<int64_t, size_t> replayed;
};

Subscriber::Subscriber(SubscriberOptions options, Ledger* ledger)
    : options_(std::move(options)), ledger_(ledger) {}

Subscriber::~Subscriber() { Stop(); }

absl::Status Subscriber::Start() {
  CHECK(sockets_ == nullptr);
  auto s = std::make_unique<Sockets>();
  try {
    SetCommon(s->sub, options_);
    s->sub.set(zmq::sockopt::rcvhwm, 1000000);
    s->sub.set(zmq::sockopt::subscribe, options_.topic);
    const std::string mon = absl::StrCat("inproc://kv-events-monitor-",
                                         reinterpret_cast<uintptr_t>(this));
    CHECK(zmq_socket_monitor(s->sub.handle(), mon.c_str(),
                             ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) == 0);
    zmq::socket_t monitor(s->context, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    monitor.connect(mon);
    s->sub.connect(options_.endpoint);
    absl::Status hs =
        AwaitHandshake(monitor, options_.connect_timeout, options_.endpoint);
    zmq_socket_monitor(s->sub.handle(), nullptr, 0);
    if (!hs.ok()) return hs;
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv events ", options_.endpoint, ": ", e.what()));
  }
  // The subscription travels after the handshake; give it a moment to
  // reach the publisher before anyone counts on what follows.
  absl::SleepFor(absl::Milliseconds(100));
  sockets_ = std::move(s);
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Subscriber::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  sockets_.reset();
}

void Subscriber::WaitQuiet(absl::Duration quiet, absl::Duration max) const {
  const absl::Time deadline = absl::Now() + max;
  while (absl::Now() < deadline) {
    const absl::Time last = absl::FromUnixMicros(last_message_us_.load());
    const absl::Duration since = absl::Now() - last;
    if (since >= quiet) return;
    absl::SleepFor(std::min(quiet - since, deadline - absl::Now()));
  }
}

void Subscriber::Loop() {
  while (!stop_.load()) {
    bool pending = false;
    {
      absl::MutexLock lock(&sync_mu_);
      pending = sync_asked_ > sync_done_;
    }
    zmq::pollitem_t item{sockets_->sub.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(pending ? 0 : 20));
    // Drain what is queued before polling again.
    int drained = 0;
    for (; drained < 1024 && !stop_.load(); ++drained) {
      std::vector<zmq::message_t> msgs;
      if (!zmq::recv_multipart(sockets_->sub, std::back_inserter(msgs),
                               zmq::recv_flags::dontwait)) {
        break;
      }
      last_message_us_ = NowUs();
      OnMessage(Frames(msgs));
    }
    // A steady stream is read in bursts: a wake-up (of this thread and of
    // ZeroMQ's) per few milliseconds rather than per message.
    if (drained > 0 && drained < 1024 && !pending) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    int64_t ticket = 0;
    {
      absl::MutexLock lock(&sync_mu_);
      if (sync_asked_ > sync_done_) ticket = sync_asked_;
    }
    if (ticket > 0) {
      const bool ok = CatchUp();
      absl::MutexLock lock(&sync_mu_);
      sync_ok_ = ok;
      sync_done_ = ticket;
    }
  }
}

void Subscriber::Ingest(int64_t seq, const std::string& payload) {
  absl::StatusOr<Batch> batch = DecodeBatch(payload);
  if (!batch.ok()) {
    ledger_->RecordUndecodable(seq, std::string(batch.status().message()),
                               NowUs());
    return;
  }
  ledger_->Ingest(seq, *batch, NowUs());
}

void Subscriber::OnMessage(const std::vector<std::string>& frames) {
  Sockets& s = *sockets_;
  if (frames.size() != 3) {
    ledger_->RecordUndecodable(
        s.expected,
        absl::StrCat("a message of ", frames.size(),
                     " frames (topic, sequence, payload expected)"),
        NowUs());
    return;
  }
  absl::StatusOr<int64_t> seq = DecodeSequence(frames[1]);
  if (!seq.ok() || *seq < 0) {
    ledger_->RecordUndecodable(s.expected, "a bad sequence frame", NowUs());
    return;
  }
  if (!s.have_seq) {
    s.have_seq = true;  // joined mid-stream: what came before is not ours
  } else if (*seq < s.expected && s.replayed.count(*seq) > 0 &&
             s.replayed[*seq] == std::hash<std::string>()(frames[2])) {
    return;  // a copy of a message Sync() already took from the replay
  } else if (*seq < s.expected) {
    ledger_->RecordRestart(s.expected - 1, *seq, NowUs());
    if (*seq > 0) Recover(0, *seq - 1);
  } else if (*seq > s.expected) {
    Recover(s.expected, *seq - 1);
  }
  Ingest(*seq, frames[2]);
  s.expected = *seq + 1;
  // Copies of replayed messages come before anything newer (one connection
  // keeps its order): past them, a sequence going back is a restart again.
  if (!s.replayed.empty() && *seq > s.replayed.rbegin()->first) {
    s.replayed.clear();
  }
}

std::optional<std::map<int64_t, std::string>> Subscriber::Replay(int64_t from,
                                                                 int64_t to) {
  Sockets& s = *sockets_;
  if (options_.replay_endpoint.empty()) return std::nullopt;
  std::map<int64_t, std::string> got;
  try {
    if (s.replay == nullptr) {
      s.replay =
          std::make_unique<zmq::socket_t>(s.context, zmq::socket_type::dealer);
      SetCommon(*s.replay, options_);
      s.replay->connect(options_.replay_endpoint);
    }
    // vLLM's and SGLang's replay protocol (docs/kv-events-wire.md): ("",
    // start sequence); one answer per buffered batch from there, then
    // sequence -1. One that starts later than asked lost the rest.
    s.replay->send(zmq::buffer(std::string()), zmq::send_flags::sndmore);
    s.replay->send(zmq::buffer(EncodeSequence(from)), zmq::send_flags::none);
    const absl::Time deadline = absl::Now() + options_.replay_timeout;
    while (absl::Now() < deadline) {
      zmq::pollitem_t item{s.replay->handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> msgs;
      if (!zmq::recv_multipart(*s.replay, std::back_inserter(msgs))) break;
      // A DEALER sees ["", seq, payload] (SGLang, older vLLM) or ["",
      // topic, seq, payload] (vLLM since #45177): the last two frames.
      std::vector<std::string> f = Frames(msgs);
      if (f.size() < 2 || f.size() > 4) continue;
      f.erase(f.begin(), f.end() - 2);
      absl::StatusOr<int64_t> seq = DecodeSequence(f[0]);
      if (!seq.ok()) continue;
      if (*seq == -1) {
        ledger_->CountReplayed(static_cast<int64_t>(got.size()));
        return got;
      }
      if (*seq >= from && *seq <= to) got.emplace(*seq, std::move(f[1]));
    }
  } catch (const zmq::error_t&) {
  }
  // No end marker in time: a later answer would be read as the next one's,
  // so this socket is dropped.
  s.replay.reset();
  return std::nullopt;
}

void Subscriber::Recover(int64_t from, int64_t to) {
  std::map<int64_t, std::string> got =
      Replay(from, to).value_or(std::map<int64_t, std::string>{});
  int64_t next = from;
  bool missing = false;
  for (auto& [seq, payload] : got) {
    if (seq > next) {
      ledger_->RecordGap(next, seq - 1, false, NowUs());
      missing = true;
    }
    Ingest(seq, payload);
    next = seq + 1;
  }
  if (next <= to) {
    ledger_->RecordGap(next, to, false, NowUs());
  } else if (!missing) {
    ledger_->RecordGap(from, to, true, NowUs());
  }
}

bool Subscriber::CatchUp() {
  Sockets& s = *sockets_;
  if (!s.have_seq) {
    // Nothing received yet: where the stream stands is the last message
    // the replay socket holds. What came before is not any window's.
    std::optional<std::map<int64_t, std::string>> all =
        Replay(0, std::numeric_limits<int64_t>::max());
    if (!all.has_value()) return false;
    if (!all->empty()) {
      s.have_seq = true;
      s.expected = all->rbegin()->first + 1;
      for (const auto& [seq, payload] : *all) {
        s.replayed[seq] = std::hash<std::string>()(payload);
      }
    }
    return true;
  }
  const int64_t from = s.expected;
  std::optional<std::map<int64_t, std::string>> got =
      Replay(from, std::numeric_limits<int64_t>::max());
  if (!got.has_value()) return false;
  if (got->empty()) return true;  // nothing sent that we lack
  int64_t next = from;
  for (auto& [seq, payload] : *got) {
    if (seq > next) ledger_->RecordGap(next, seq - 1, false, NowUs());
    // The same message may still arrive on the SUB socket: not a restart.
    s.replayed[seq] = std::hash<std::string>()(payload);
    Ingest(seq, payload);
    next = seq + 1;
  }
  s.expected = next;
  return true;
}

bool Subscriber::Sync() {
  absl::MutexLock lock(&sync_mu_);
  const int64_t ticket = ++sync_asked_;
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_) {
    return sync_done_ >= ticket;
  };
  if (!sync_mu_.AwaitWithTimeout(
          absl::Condition(&done),
          2 * options_.replay_timeout + absl::Milliseconds(200))) {
    return false;
  }
  return sync_ok_;
}

}  // namespace kvcanary::auditor::kv_events
