#include "bench/kv_transfer_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/check.h"
#include "common/crc32c.h"
#include "common/text_table.h"
#include "common/tls.h"
#include "engine/transfer/internal_auth.h"
#include "engine/transfer/kv_admission.h"
#include "engine/transfer/kv_connection.h"
#include "engine/transfer/kv_receiver.h"
#include "engine/transfer/kv_sender.h"
#include "engine/transfer/kv_transfer_format.h"

namespace kvcanary::engine::bench {
namespace {

// The thresholds of issue 13, item 1 (transfer token on, TLS off).
constexpr double kFramedThresholdMBps = 1400;
constexpr double kRatioThreshold = 0.9;
// Issue 25, item 8: framed over mutual TLS against the lower of framed
// plain and one core's AES-128-GCM, measured in the same round.
constexpr double kTlsRatioThreshold = 0.8;
// A 512-token prompt of stories260K: 32 pages in each of its 5 layers.
constexpr int kSmallTransferPages = 160;

const absl::Duration kTimeout = absl::Seconds(10);
const TenantId kTenant(1);

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// CPU time the calling thread has used, user and system.
double ThreadCpuSeconds() {
  rusage u{};
  CHECK_EQ(getrusage(RUSAGE_THREAD, &u), 0);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

// The 260K model's KV geometry: 4 KB of K/V per full page of one layer.
KvGeometry Geometry() {
  KvGeometry g;
  g.page_tokens = 16;
  g.n_layers = 5;
  g.kv_heads = 4;
  g.head_dim = 8;
  g.vocab_size = 512;
  return g;
}

// What the benchmark moves: `transfers` transfers of `prompt_pages` full
// pages in every layer.
struct Plan {
  int transfers = 0;
  int prompt_pages = 0;
  std::vector<kv::Page> pages;  // one transfer's, stamped per transfer
  uint64_t kv_bytes = 0;        // K/V bytes of all transfers
  std::string stream;           // one transfer's page frames, encoded
};

Plan MakePlan(int transfer_mb, int pages_per_transfer) {
  const KvGeometry g = Geometry();
  Plan plan;
  plan.prompt_pages = std::max(1, pages_per_transfer / g.n_layers);
  for (int index = 0; index < plan.prompt_pages; ++index) {
    for (int layer = 0; layer < g.n_layers; ++layer) {
      kv::Page p;
      p.index = static_cast<uint32_t>(index);
      p.layer = static_cast<uint32_t>(layer);
      p.stamp.layer = static_cast<uint32_t>(layer);
      p.stamp.page = PageId(static_cast<uint32_t>(index));
      p.stamp.filled = static_cast<uint32_t>(g.page_tokens);
      p.slots = static_cast<uint32_t>(g.page_tokens);
      p.kv_bytes.assign(2 * g.page_tokens * g.row_bytes(),
                        static_cast<char>(0x5a + index + layer));
      kv::EncodeFrame(p, &plan.stream);
      plan.pages.push_back(std::move(p));
    }
  }
  const uint64_t total = static_cast<uint64_t>(transfer_mb) << 20;
  plan.transfers =
      static_cast<int>(std::max<uint64_t>(1, total / plan.stream.size()));
  plan.kv_bytes = uint64_t{2} * g.page_tokens * g.row_bytes() *
                  plan.pages.size() * plan.transfers;
  return plan;
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

// A figure in MB/s of K/V delivered, or the problems that void it.
struct Figure {
  uint64_t kv_bytes = 0;  // delivered
  double seconds = 0;
  std::vector<std::string> problems;
  // CPU time (user and system) of the sending thread and of the decode
  // side's session threads, waits that poll included.
  double sender_cpu = 0;
  double receiver_cpu = 0;

  double mb_per_s() const { return seconds > 0 ? kv_bytes / 1e6 / seconds : 0; }
  // CPU seconds per GB of K/V delivered.
  double sender_s_per_gb() const { return sender_cpu / (kv_bytes / 1e9); }
  double receiver_s_per_gb() const { return receiver_cpu / (kv_bytes / 1e9); }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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

// Every transfer of `plan` through KvSender -> KvReceiver (over mutual TLS
// when `tls` is set): Hello and Auth once per session, then for each
// transfer Metadata with the transfer token, the pages, Commit, the Ack.
// `sessions`: the sender keeps its session between transfers (as the
// prefill node does); otherwise every transfer opens a connection of its
// own, handshake included. Timed from the first connect to the last Ack.
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

// A connected loopback TCP pair of plain sockets, as the OS sets them up.
absl::Status RawPair(int* client, int* server) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return absl::InternalError("raw listener");
  }
  *client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(*client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return absl::InternalError("raw connect");
  }
  *server = accept(l, nullptr, nullptr);
  close(l);
  int one = 1;
  setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return *server >= 0 ? absl::OkStatus() : absl::InternalError("raw accept");
}

// One read of up to `size` bytes; with `poll_first`, a reader that finds no
// data polls for kv::kPollBeforeSleep before it sleeps, as the KV sockets
// wait, so that the framed figure is set against a reader as quick to wake.
ssize_t RawRead(int s, char* buf, size_t size, bool poll_first) {
  const ssize_t n = recv(s, buf, size, MSG_DONTWAIT);
  if (n >= 0 || errno != EAGAIN) return n;
  if (poll_first) {
    pollfd p{s, POLLIN, 0};
    (void)kv::ReadyBeforeSleep(&p, 1, absl::InfiniteFuture());
  }
  return recv(s, buf, size, 0);
}

// The same bytes as every transfer's page frames, unframed: one bulk send
// over plain TCP, read in 256 KiB reads, no CRC, no decoding. MB/s of the
// K/V they hold, so that it compares with the framed figures.
Figure RawFigure(const Plan& plan, bool poll_first) {
  int c = -1, s = -1;
  if (absl::Status st = RawPair(&c, &s); !st.ok()) {
    return {0, 0, {st.ToString()}};
  }
  const uint64_t total = uint64_t{plan.stream.size()} * plan.transfers;
  std::atomic<uint64_t> received{0};
  std::thread reader([&] {
    std::vector<char> buf(256 << 10);
    uint64_t got = 0;
    while (got < total) {
      const ssize_t n = RawRead(s, buf.data(), buf.size(), poll_first);
      if (n <= 0) {
        shutdown(s, SHUT_RDWR);  // the sender's writes fail, not block
        break;
      }
      got += static_cast<uint64_t>(n);
    }
    received = got;
  });
  const auto start = Clock::now();
  bool failed = false;
  for (int t = 0; t < plan.transfers && !failed; ++t) {
    for (size_t off = 0; off < plan.stream.size();) {
      const ssize_t n = send(c, plan.stream.data() + off,
                             plan.stream.size() - off, MSG_NOSIGNAL);
      if (n <= 0) {
        failed = true;
        shutdown(c, SHUT_RDWR);
        break;
      }
      off += static_cast<size_t>(n);
    }
  }
  reader.join();
  const double seconds = Seconds(start);
  close(c);
  close(s);
  Figure figure;
  if (received != total) {
    figure.problems.push_back(
        absl::StrCat("raw: received ", received.load(), " of ", total));
  }
  // The K/V those bytes hold, for a figure comparable with the framed ones.
  figure.kv_bytes = static_cast<uint64_t>(
      plan.kv_bytes * (received / static_cast<double>(total)));
  figure.seconds = seconds;
  return figure;
}

// Mutual TLS as `up --tls` sets it up, in a temporary directory.
std::shared_ptr<const tls::Context> BenchTls() {
  char dir[] = "/tmp/kvcanary-bench-tls-XXXXXX";
  if (mkdtemp(dir) == nullptr) return nullptr;
  std::shared_ptr<const tls::Context> ctx;
  auto files = tls::WriteDeploymentCerts(dir, {"127.0.0.1"});
  if (files.ok()) {
    auto loaded = tls::Context::Load(*files);
    if (loaded.ok()) ctx = *loaded;
    for (const std::string& f : {files->cert, files->key, files->ca}) {
      unlink(f.c_str());
    }
  }
  rmdir(dir);
  return ctx;
}

bool ReportProblems(const char* figure, const Figure& f) {
  for (const std::string& p : f.problems) {
    std::fprintf(stderr, "kv transfer (%s): %s\n", figure, p.c_str());
  }
  return f.problems.empty();
}

double CrcGBps(const Plan& plan) {
  const auto start = Clock::now();
  uint32_t crc = 0;
  for (int t = 0; t < plan.transfers; ++t) {
    crc = Crc32cExtend(crc, plan.stream.data(), plan.stream.size());
  }
  const double seconds = Seconds(start);
  if (crc == 0) std::printf("(crc 0)\n");  // keeps the loop from being elided
  return plan.stream.size() * static_cast<double>(plan.transfers) / 1e9 /
         seconds;
}

// One core's AES-128-GCM rate over the same bytes, in MB/s, as a TLS 1.3
// sender seals them: records of 16 KiB, each with its own IV and tag
// (OpenSSL's EVP, so AES-NI and carry-less multiply where the CPU has
// them). What mutual TLS costs per byte at least, on each side.
double AesGcmMBps(const Plan& plan) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  CHECK(ctx != nullptr);
  unsigned char key[16] = {};
  unsigned char iv[12] = {};
  CHECK_EQ(RAND_bytes(key, sizeof(key)), 1);
  CHECK_EQ(EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), nullptr, key, iv), 1);
  constexpr size_t kRecord = 16384;
  std::vector<unsigned char> out(kRecord + 16);
  unsigned char tag[16];
  uint64_t sealed = 0;
  const auto start = Clock::now();
  for (int t = 0; t < plan.transfers; ++t) {
    const auto* in = reinterpret_cast<const unsigned char*>(plan.stream.data());
    for (size_t at = 0; at < plan.stream.size(); at += kRecord) {
      const int n =
          static_cast<int>(std::min(kRecord, plan.stream.size() - at));
      ++iv[11];  // a new nonce per record, as TLS derives it
      int len = 0;
      CHECK_EQ(EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv), 1);
      CHECK_EQ(EVP_EncryptUpdate(ctx, out.data(), &len, in + at, n), 1);
      CHECK_EQ(EVP_EncryptFinal_ex(ctx, out.data() + len, &len), 1);
      CHECK_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, sizeof(tag), tag),
               1);
      sealed += n;
    }
  }
  const double seconds = Seconds(start);
  EVP_CIPHER_CTX_free(ctx);
  return sealed / 1e6 / seconds;
}

// Each figure's rounds, in MB/s; the ratios', round by round.
struct Results {
  std::vector<double> framed, raw, raw_polled, small, ratio, ratio_polled;
  // Over mutual TLS with sessions kept, one core's AES-128-GCM, and the
  // TLS figure against the lower of framed plain and AES.
  std::vector<double> tls, aes, ratio_tls;
  // CPU seconds per GB on each side: framed plain, then mutual TLS.
  std::vector<double> plain_send_cpu, plain_recv_cpu, tls_send_cpu,
      tls_recv_cpu;
  double tls_fresh = 0;  // over mutual TLS, a handshake per transfer
  double crc_gbps = 0;
};

void PrintTable(const Plan& plan, const Plan& small, const Results& r) {
  std::printf("\n## KV transfer on loopback\n\n");
  std::printf(
      "Page frames of %zu bytes (the 260K model's geometry: 4 KB of K/V), "
      "%.0f MB of K/V per figure and round; the median of %zu rounds, each "
      "framed then raw (both readers)\n\n",
      plan.stream.size() / plan.pages.size(), plan.kv_bytes / 1e6,
      r.ratio.size());
  TextTable table({{"figure"},
                   {"value", TextTable::kRight},
                   {"threshold", TextTable::kRight}},
                  TextTable::Markdown());
  const auto row = [&table](std::string name, std::string value,
                            std::string threshold) {
    table.AddRow({std::move(name), std::move(value), std::move(threshold)});
  };
  const auto mbps = [](double v) { return absl::StrFormat("%.0f MB/s", v); };
  row(absl::StrCat("framed, CRC32C per page, transfers of ", plan.pages.size(),
                   " frames"),
      mbps(Median(r.framed)),
      absl::StrFormat(">= %.0f MB/s", kFramedThresholdMBps));
  row("raw TCP: the same bytes in one unframed bulk send", mbps(Median(r.raw)),
      "");
  row("raw TCP, reads polling before they sleep (as the KV sockets)",
      mbps(Median(r.raw_polled)), "");
  const std::string ratio_threshold =
      absl::StrFormat(">= %.2f", kRatioThreshold);
  row("framed / raw, round by round", absl::StrFormat("%.3f", Median(r.ratio)),
      ratio_threshold);
  row("framed / raw with polling reads, round by round",
      absl::StrFormat("%.3f", Median(r.ratio_polled)), ratio_threshold);
  row(absl::StrCat("framed, transfers of ", small.pages.size(),
                   " frames (a 512-token 260K prompt)"),
      mbps(Median(r.small)), "");
  const double bound = std::min(Median(r.framed), Median(r.aes));
  row("framed over mutual TLS, sessions kept between transfers",
      mbps(Median(r.tls)),
      absl::StrFormat(">= %.0f MB/s", kTlsRatioThreshold * bound));
  row("AES-128-GCM, one core (EVP, 16 KiB records), same bytes",
      mbps(Median(r.aes)), "");
  row("mutual TLS / min(framed, AES-128-GCM), round by round",
      absl::StrFormat("%.3f", Median(r.ratio_tls)),
      absl::StrFormat(">= %.2f", kTlsRatioThreshold));
  row("framed over mutual TLS, a handshake per transfer", mbps(r.tls_fresh),
      "");
  const auto cpu = [](const std::vector<double>& send,
                      const std::vector<double>& recv) {
    return absl::StrFormat("%.2f / %.2f s", Median(send), Median(recv));
  };
  row("CPU per GB, sender / receiver side: framed plain",
      cpu(r.plain_send_cpu, r.plain_recv_cpu), "");
  row("CPU per GB, sender / receiver side: framed over mutual TLS",
      cpu(r.tls_send_cpu, r.tls_recv_cpu), "");
  row(Crc32cUsesIsal() ? "CRC32C alone, same bytes (ISA-L)"
                       : "CRC32C alone, same bytes (CRC32 instruction)",
      absl::StrFormat("%.2f GB/s", r.crc_gbps), "");
  std::printf("%s", table.ToString().c_str());
}

}  // namespace

bool TransferFigures(const TransferBenchOptions& options) {
  Plan plan = MakePlan(options.transfer_mb, options.pages_per_transfer);
  Plan small = MakePlan(options.transfer_mb, kSmallTransferPages);
  Results r;
  const std::shared_ptr<const tls::Context> ctx = BenchTls();
  if (ctx == nullptr) {
    std::fprintf(stderr, "kv transfer: no TLS context for the bench\n");
    return false;
  }
  // Framed then raw in each round, so that a busy moment of the machine
  // falls on one round, not on one figure; the first failure ends the run.
  for (int round = 0; round < options.rounds; ++round) {
    const Figure framed = FramedFigure(plan, nullptr, /*sessions=*/true);
    if (!ReportProblems("framed", framed)) return false;
    const Figure raw = RawFigure(plan, /*poll_first=*/false);
    if (!ReportProblems("raw", raw)) return false;
    const Figure raw_polled = RawFigure(plan, /*poll_first=*/true);
    if (!ReportProblems("raw, polling reads", raw_polled)) return false;
    const Figure small_framed = FramedFigure(small, nullptr, /*sessions=*/true);
    if (!ReportProblems("framed, small transfers", small_framed)) return false;
    r.framed.push_back(framed.mb_per_s());
    r.raw.push_back(raw.mb_per_s());
    r.raw_polled.push_back(raw_polled.mb_per_s());
    r.ratio.push_back(framed.mb_per_s() / raw.mb_per_s());
    r.ratio_polled.push_back(framed.mb_per_s() / raw_polled.mb_per_s());
    r.small.push_back(small_framed.mb_per_s());
    const Figure tls = FramedFigure(plan, ctx.get(), /*sessions=*/true);
    if (!ReportProblems("framed over mutual TLS", tls)) return false;
    const double aes = AesGcmMBps(plan);
    r.plain_send_cpu.push_back(framed.sender_s_per_gb());
    r.plain_recv_cpu.push_back(framed.receiver_s_per_gb());
    r.tls_send_cpu.push_back(tls.sender_s_per_gb());
    r.tls_recv_cpu.push_back(tls.receiver_s_per_gb());
    r.tls.push_back(tls.mb_per_s());
    r.aes.push_back(aes);
    r.ratio_tls.push_back(tls.mb_per_s() / std::min(framed.mb_per_s(), aes));
  }
  const Figure fresh = FramedFigure(plan, ctx.get(), /*sessions=*/false);
  if (!ReportProblems("framed over mutual TLS, fresh connections", fresh)) {
    return false;
  }
  r.tls_fresh = fresh.mb_per_s();
  r.crc_gbps = CrcGBps(plan);
  PrintTable(plan, small, r);
  return true;
}

}  // namespace kvcanary::engine::bench
