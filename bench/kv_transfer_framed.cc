// The framed side of the KV transfer bench: a decode host in memory that
// reserves, claims and counts every transfer, its KV port served through
// KvGate, and the sender's transfers timed against it.
#include "bench/kv_transfer_framed.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/check.h"
#include "common/temp_dir.h"
#include "engine/transfer/internal_auth.h"
#include "engine/transfer/kv_admission.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_receiver.h"
#include "engine/transfer/kv_sender.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine::bench {
namespace {

const absl::Duration kTimeout = absl::Seconds(10);
const TenantId kTenant(1);

// CPU time the calling thread has used, user and system.
double ThreadCpuSeconds() {
  rusage u{};
  CHECK_EQ(getrusage(RUSAGE_THREAD, &u), 0);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

// The decode node's side, in memory: a reservation per transfer, claimed
// by its token; what is handed over is counted, then dropped. Any refusal,
// violation or failure is a problem that voids the run. Thread-safe.
class BenchHost : public KvReceiverHost {
 public:
  TransferToken Reserve(RequestId id, int prompt_pages) {
    KvReservation r;
    r.request = id;
    r.tenant = kTenant;
    r.prompt_pages = prompt_pages;
    r.prompt_tokens = prompt_pages * Geometry().page_tokens;
    r.reserved_pages = prompt_pages;
    const TransferToken token = NewTransferToken();
    absl::MutexLock lock(&mu_);
    reservations_[id] = {r, token, false};
    return token;
  }
  std::unique_ptr<KvClaim> Claim(const kv::Metadata& meta) override;
  void Refused(const char* reason) override {
    Problem(absl::StrCat("decode side refused a connection: ", reason));
  }
  void Violation(const WatermarkViolation&) override {
    Problem("a watermark violation");
  }
  void Committed(const TraceEvent&) override {}

  void Problem(std::string what) {
    absl::MutexLock lock(&mu_);
    problems_.push_back(std::move(what));
  }
  void Delivered(const KvDelivery& delivery) {
    uint64_t bytes = 0;
    for (const kv::Page& p : delivery.pages) bytes += p.kv_bytes.size();
    absl::MutexLock lock(&mu_);
    delivered_kv_bytes_ += bytes;
  }
  void AddReceiverCpu(double seconds) {
    absl::MutexLock lock(&mu_);
    receiver_cpu_ += seconds;
  }
  double receiver_cpu() {
    absl::MutexLock lock(&mu_);
    return receiver_cpu_;
  }
  uint64_t delivered_kv_bytes() {
    absl::MutexLock lock(&mu_);
    return delivered_kv_bytes_;
  }
  std::vector<std::string> problems() {
    absl::MutexLock lock(&mu_);
    return problems_;
  }

 private:
  struct Entry {
    KvReservation reservation;
    TransferToken token;
    bool claimed;
  };
  absl::Mutex mu_;
  std::map<RequestId, Entry> reservations_ ABSL_GUARDED_BY(mu_);
  uint64_t delivered_kv_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double receiver_cpu_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> problems_ ABSL_GUARDED_BY(mu_);
};

class BenchClaim : public KvClaim {
 public:
  BenchClaim(BenchHost* host, const KvReservation& r)
      : host_(host), reservation_(r) {}
  const KvReservation& reservation() const override { return reservation_; }
  void WritePage(kv::Page) override { host_->Problem("a page written early"); }
  void Fail(const absl::Status& verdict) override {
    host_->Problem(absl::StrCat("transfer failed: ", verdict.ToString()));
  }
  absl::Status HandOver(KvDelivery delivery) override {
    host_->Delivered(delivery);
    return absl::OkStatus();
  }

 private:
  BenchHost* host_;
  KvReservation reservation_;
};

std::unique_ptr<KvClaim> BenchHost::Claim(const kv::Metadata& meta) {
  absl::MutexLock lock(&mu_);
  auto it = reservations_.find(meta.request);
  if (it == reservations_.end() || it->second.claimed ||
      !SameToken(it->second.token, meta.transfer_token)) {
    return nullptr;
  }
  it->second.claimed = true;
  return std::make_unique<BenchClaim>(this, it->second.reservation);
}

// The decode node's KV port, as DecodeNode runs it: each accepted
// connection through KvGate (the handshake, then the session's transfers)
// on a thread of its own, until the listener is closed.
void ServeTransfers(kv::FrameListener& listener, const KvReceiver& receiver,
                    const tls::Context* tls, BenchHost* host) {
  KvAdmissionOptions options;
  options.auth_deadline = kTimeout;
  KvGate gate(options, host, &receiver, tls);
  std::vector<std::thread> sessions;
  while (true) {
    auto conn = listener.Accept(kTimeout);
    if (!conn.ok()) {
      if (!absl::IsCancelled(conn.status())) {
        host->Problem(absl::StrCat("accept: ", conn.status().ToString()));
      }
      break;
    }
    const absl::Time deadline = absl::Now() + options.auth_deadline;
    std::unique_ptr<KvAdmission::Hold> hold = gate.Admit(**conn);
    if (hold == nullptr) continue;  // counted as a problem by the host
    sessions.emplace_back(
        [&gate, host, deadline, c = std::move(*conn), h = std::move(hold)] {
          const double cpu = ThreadCpuSeconds();
          absl::Cleanup count = [&] {
            host->AddReceiverCpu(ThreadCpuSeconds() - cpu);
          };
          gate.Serve(
              *c, *h, deadline,
              [host](const absl::Status& verdict, RequestId, bool, uint64_t) {
                if (!verdict.ok()) {
                  host->Problem(absl::StrCat("receive: ", verdict.ToString()));
                }
              });
        });
  }
  gate.ShutdownAll();  // the sender's idle session
  for (std::thread& t : sessions) t.join();
}

kv::Metadata MetadataFor(RequestId id, const Plan& plan,
                         const TransferToken& token) {
  const KvGeometry g = Geometry();
  kv::Metadata m;
  m.request = id;
  m.tenant = kTenant;
  m.prompt_tokens = static_cast<uint32_t>(plan.prompt_pages * g.page_tokens);
  m.reserved_pages = static_cast<uint32_t>(plan.prompt_pages);
  m.page_tokens = static_cast<uint32_t>(g.page_tokens);
  m.n_layers = static_cast<uint32_t>(g.n_layers);
  m.kv_heads = static_cast<uint32_t>(g.kv_heads);
  m.head_dim = static_cast<uint32_t>(g.head_dim);
  m.transfer_token = token;
  return m;
}

}  // namespace

Figure FramedFigure(Plan& plan, const tls::Context* tls, bool sessions) {
  Figure figure;
  const SharedSecret secret =
      SharedSecret::FromString(SharedSecret::Generate());
  BenchHost host;
  KvReceiverOptions options;
  options.secret = &secret;
  options.geometry = Geometry();
  options.frame_timeout = kTimeout;
  const KvReceiver receiver(&host, options);
  auto listener = kv::FrameListener::Listen("127.0.0.1", 0);
  if (!listener.ok()) return {0, 0, {listener.status().ToString()}};
  std::vector<TransferToken> tokens;
  for (int t = 0; t < plan.transfers; ++t) {
    tokens.push_back(host.Reserve(RequestId(t + 1), plan.prompt_pages));
  }
  std::thread decode([&] { ServeTransfers(**listener, receiver, tls, &host); });
  KvSender sender(&secret, kTimeout, tls);
  if (!sessions) sender.set_max_idle_per_peer(0);
  const KvPeer peer{"decode", "127.0.0.1", (*listener)->port()};
  const auto start = Clock::now();
  const double cpu = ThreadCpuSeconds();
  for (int t = 0; t < plan.transfers; ++t) {
    const RequestId id(t + 1);
    for (kv::Page& p : plan.pages) {
      p.stamp.writer = StampIdentity{id, kTenant, PageGeneration(1)};
      p.stamp.owner = p.stamp.writer;
    }
    uint64_t bytes = 0;
    const absl::Status s =
        sender.Send(peer, MetadataFor(id, plan, tokens[t]), plan.pages,
                    /*first_token=*/1, TransferDamage::kNone, &bytes);
    if (!s.ok()) {
      host.Problem(absl::StrCat("send: ", s.ToString()));
      break;
    }
  }
  const double seconds = Seconds(start);
  figure.sender_cpu = ThreadCpuSeconds() - cpu;
  (*listener)->Close();  // a failed run's receiver stops waiting
  decode.join();
  figure.receiver_cpu = host.receiver_cpu();
  figure.problems = host.problems();
  if (host.delivered_kv_bytes() != plan.kv_bytes) {
    figure.problems.push_back(absl::StrCat("delivered ",
                                           host.delivered_kv_bytes(), " of ",
                                           plan.kv_bytes, " K/V bytes"));
  }
  figure.kv_bytes = host.delivered_kv_bytes();
  figure.seconds = seconds;
  return figure;
}

std::shared_ptr<const tls::Context> BenchTls() {
  // The certificates only live until they are loaded: a directory under
  // $TMPDIR, removed on return.
  absl::StatusOr<TempDir> dir = TempDir::Create("kvcanary-bench-tls");
  if (!dir.ok()) return nullptr;
  std::shared_ptr<const tls::Context> ctx;
  auto files = tls::WriteDeploymentCerts(dir->path(), {"127.0.0.1"});
  if (files.ok()) {
    auto loaded = tls::Context::Load(*files);
    if (loaded.ok()) ctx = *loaded;
  }
  return ctx;
}

}  // namespace kvcanary::engine::bench
