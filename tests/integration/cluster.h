// Test helper: the real topology as separate processes on loopback —
// `kvcanary-engine up` (router + prefill + decode), or single roles with
// `kvcanary-engine serve` — and an HTTP client for it.
#ifndef KVCANARY_TESTS_INTEGRATION_CLUSTER_H_
#define KVCANARY_TESTS_INTEGRATION_CLUSTER_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/random.h"
#include "common/trace_event.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace kvcanary::testing {

inline std::string EngineBinary() {
  return std::string(KVCANARY_BIN_DIR) + "/kvcanary-engine";
}

// Writes a tenants file with four tenants, key "sk-<name>" each.
inline std::string WriteTenantsFile(const std::string& contents = "") {
  // One file per call: tests run as parallel processes sharing TempDir().
  static int counter = 0;
  const std::string path = ::testing::TempDir() + "/kvcanary-tenants-" +
                           std::to_string(getpid()) + "-" +
                           std::to_string(counter++) + ".json";
  std::ofstream f(path);
  if (!contents.empty()) {
    f << contents;
    return path;
  }
  f << R"({"tenants": [
    {"id": "acme", "api_keys": ["sk-acme"]},
    {"id": "globex", "api_keys": ["sk-globex"]},
    {"id": "initech", "api_keys": ["sk-initech"]},
    {"id": "umbrella", "api_keys": ["sk-umbrella"]}]})";
  return path;
}

// Writes a fresh internal secret (64 hex characters, mode 0600) and
// returns its path.
inline std::string WriteSecretFile() {
  static std::atomic<int> counter{0};
  const std::string path = ::testing::TempDir() + "/kvcanary-secret-" +
                           std::to_string(getpid()) + "-" +
                           std::to_string(counter++);
  std::remove(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return "";
  const std::string secret = RandomHex(32) + "\n";
  const bool ok = write(fd, secret.data(), secret.size()) ==
                  static_cast<ssize_t>(secret.size());
  close(fd);
  return ok ? path : "";
}

// The first line of a file, without its end.
inline std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// A port on 127.0.0.1 nothing listens on right now (for servers that
// cannot take 0, and KV ports a configuration names before the node starts).
// Drawn at random below the kernel's ephemeral range: a port there is never
// handed out to the many sockets parallel tests bind to port 0, so between
// this pick and the server's bind only another such pick could take it.
inline int FreePort() {
  int low = 32768;  // Linux's default ip_local_port_range
  {
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    int lo = 0;
    if (range >> lo && lo > 12000) low = lo;
  }
  static std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(10000, low - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(rng);
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool free =
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  ADD_FAILURE() << "no free port below " << low;
  return 0;
}

// A child process running the engine binary, with its stdout lines.
class Process {
 public:
  // Runs `binary` (default: kvcanary-engine) with `args`.
  explicit Process(const std::vector<std::string>& args,
                   const std::string& binary = EngineBinary()) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      // A test that dies (a crash, a signal) takes its servers with it:
      // an orphan holding the output pipe would hang ctest.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      std::vector<std::string> a = {binary};
      a.insert(a.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& s : a) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  Process(const Process&) = delete;  // one owner kills and reaps the child
  Process& operator=(const Process&) = delete;
  ~Process() {
    Signal(SIGTERM);
    Wait();
    if (fd_ >= 0) close(fd_);
  }
  // The next stdout line, or "" after `timeout_ms`.
  std::string ReadLine(int timeout_ms = 60000) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      if (read(fd_, &c, 1) <= 0) return "";
      if (c == '\n') return std::exchange(partial_, std::string());
      partial_.push_back(c);
    }
    // Timed out: what came of a line so far waits for the next call (a
    // line cut at the deadline must not lose its head).
    return "";
  }
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Exit status, or -1 if it was killed by a signal.
  int Wait() {
    if (pid_ <= 0) return exit_code_;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return exit_code_;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  int exit_code_ = -1;
  std::string partial_;  // a line's head read before ReadLine timed out
};

// Second word of a line like "router http://127.0.0.1:1234".
inline std::string UrlOf(const std::string& line) {
  const size_t a = line.find(' ');
  if (a == std::string::npos) return "";
  const size_t b = line.find(' ', a + 1);
  return line.substr(a + 1,
                     b == std::string::npos ? std::string::npos : b - a - 1);
}

// `kvcanary-engine up` with the given extra flags.
class Cluster {
 public:
  // The deployment's internal secret is a file of the test's, so that a
  // test can call the internal routes as a node would.
  explicit Cluster(std::vector<std::string> extra,
                   const std::string& tenants_json = "")
      : secret_file_(WriteSecretFile()) {
    std::vector<std::string> args = {
        "up", "--port=0", "--tenants=" + WriteTenantsFile(tenants_json),
        "--internal_secret_file=" + secret_file_};
    args.insert(args.end(), extra.begin(), extra.end());
    process_ = std::make_unique<Process>(args);
    router_ = UrlOf(process_->ReadLine());
    prefill_ = UrlOf(process_->ReadLine());
    const std::string decode_line = process_->ReadLine();
    decode_ = UrlOf(decode_line);
    const size_t kv = decode_line.find(" kv=");
    if (kv != std::string::npos) kv_port_ = std::atoi(&decode_line[kv + 4]);
    trace_token_file_ = UrlOf(process_->ReadLine());
  }
  bool ok() const {
    return !router_.empty() && !prefill_.empty() && !decode_.empty() &&
           !trace_token_file_.empty();
  }
  // The internal secret, the trace token, and the file holding it.
  std::string internal_secret() const { return ReadFirstLine(secret_file_); }
  std::string trace_token() const { return ReadFirstLine(trace_token_file_); }
  const std::string& trace_token_file() const { return trace_token_file_; }
  const std::string& router() const { return router_; }
  const std::string& prefill() const { return prefill_; }
  const std::string& decode() const { return decode_; }
  int kv_port() const { return kv_port_; }  // the decode node's KV port
  Process& process() { return *process_; }

 private:
  std::string secret_file_;
  std::unique_ptr<Process> process_;
  std::string router_, prefill_, decode_, trace_token_file_;
  int kv_port_ = 0;
};

// A fixture whose tests share one `up` with default flags.
class SharedClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster({}); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(cluster_->ok()) << "kvcanary-engine up did not start";
  }
  inline static Cluster* cluster_ = nullptr;
};

// A prompt of about 2 * `words` + 1 tokens on the embedded default
// tokenizer: "once ran dog ran dog ...".
inline std::string LongPrompt(int words) {
  std::string p = "once";
  for (int i = 0; i < words; ++i) p += i % 2 ? " dog" : " ran";
  return p;
}

// A greedy /v1/completions body.
inline std::string Completion(const std::string& prompt, int max_tokens,
                              bool stream = false) {
  nlohmann::json j;
  j["prompt"] = prompt;
  j["max_tokens"] = max_tokens;
  j["temperature"] = 0;
  if (stream) j["stream"] = true;
  return j.dump();
}

struct HttpResult {
  int status = 0;  // 0: no response
  std::string body;
  nlohmann::json json;  // parsed body, or null
  httplib::Headers headers;
  // The value of response header `name`; "" if absent.
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  bool HasHeader(const std::string& name) const {
    return headers.find(name) != headers.end();
  }
};

// `read_timeout_s`: how long the client waits for a byte before it hangs
// up (status 0).
inline HttpResult Post(const std::string& base, const std::string& path,
                       const std::string& body, const std::string& api_key,
                       int read_timeout_s = 120) {
  httplib::Client client(base);
  client.set_read_timeout(read_timeout_s, 0);
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  auto res = client.Post(path.c_str(), headers, body, "application/json");
  HttpResult r;
  if (!res) {
    r.body = "no response: " + httplib::to_string(res.error());
    return r;
  }
  r.status = res->status;
  r.body = res->body;
  r.json = nlohmann::json::parse(r.body, nullptr, false);
  r.headers = res->headers;
  return r;
}

inline HttpResult Get(const std::string& base, const std::string& path,
                      const std::string& api_key = "") {
  httplib::Client client(base);
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  auto res = client.Get(path.c_str(), headers);
  HttpResult r;
  if (!res) return r;
  r.status = res->status;
  r.body = res->body;
  r.json = nlohmann::json::parse(r.body, nullptr, false);
  return r;
}

// The router's GET /health as the admin sees it (nodes' URLs, up's PIDs).
inline HttpResult AdminHealth(const Cluster& cluster) {
  return Get(cluster.router(), "/health", cluster.trace_token());
}

// `up`'s children by role, from the router's GET /health (admin token).
inline std::map<std::string, int64_t> RolePids(const Cluster& cluster) {
  std::map<std::string, int64_t> pids;
  HttpResult h = AdminHealth(cluster);
  if (!h.json.is_object() || !h.json.contains("supervisor")) return pids;
  for (const auto& r : h.json["supervisor"]["roles"]) {
    pids[r["role"].get<std::string>()] = r["pid"].get<int64_t>();
  }
  return pids;
}

// The value of a metric line `name{labels...} value` whose text contains
// `match`; -1 if absent.
inline double MetricValue(const std::string& metrics, const std::string& name,
                          const std::string& match) {
  size_t pos = 0;
  while ((pos = metrics.find(name, pos)) != std::string::npos) {
    const size_t end = metrics.find('\n', pos);
    const std::string line = metrics.substr(pos, end - pos);
    const bool sample = pos == 0 || metrics[pos - 1] == '\n';  // not # HELP
    pos = end;
    if (!sample) continue;
    if (line.find(match) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// A metric of the cluster's prefill node, as MetricValue (`match` defaults
// to its role label).
inline double PrefillMetric(const Cluster& c, const std::string& name,
                            const std::string& match = "prefill") {
  return MetricValue(Get(c.prefill(), "/metrics").body, name, match);
}

// A node's KV pages in use (its /metrics); -1 if unreadable.
inline double UsedPages(const std::string& node) {
  return MetricValue(Get(node, "/metrics").body, "kvcanary_node_kv_pages",
                     "state=\"used\"");
}

// Polls until the node reports no used pages (up to `tries` × 50 ms).
inline bool EventuallyNoPagesUsed(const std::string& node, int tries = 200) {
  for (int i = 0; i < tries; ++i) {
    if (UsedPages(node) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Streams a long completion as acme and hangs up after a few chunks: a
// client that goes away mid-answer. Returns the chunks it read.
inline int StreamAndHangUp(const std::string& router) {
  httplib::Client client(router);
  std::atomic<int> chunks{0};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Authorization", "Bearer sk-acme"}};
  req.set_header("Content-Type", "application/json");
  req.body = Completion("a very long story", 400, /*stream=*/true);
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 3;  // hang up after a few chunks
  };
  client.send(req);
  return chunks.load();
}

// Reads a node's trace stream (with the admin token) on a thread until
// Stop().
class TraceTap {
 public:
  TraceTap(const std::string& node, const std::string& token) {
    client_ = std::make_unique<httplib::Client>(node);
    thread_ = std::thread([this, token] {
      httplib::Client& client = *client_;
      client.set_read_timeout(60, 0);
      const httplib::Headers auth = {{"Authorization", "Bearer " + token}};
      client.Get("/v1/trace", auth, [this](const char* data, size_t n) {
        std::lock_guard<std::mutex> lock(mu_);
        reader_.Feed(absl::string_view(data, n));
        while (true) {
          auto e = reader_.Next();
          if (!e.ok()) {
            error_ = e.status();
            return false;
          }
          if (!e->has_value()) break;
          events_.push_back(**e);
        }
        return !stop_.load();
      });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // subscribed
  }
  // Waits for the tail of the stream, then hangs up.
  std::vector<TraceEvent> Stop() {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stop_ = true;
    client_->stop();  // unblocks the read
    thread_.join();
    EXPECT_TRUE(error_.ok()) << error_;
    return events_;
  }

 private:
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  TraceLineReader reader_;
  std::vector<TraceEvent> events_;
  absl::Status error_;
};

// Violations of `kind` in `events`.
inline std::vector<TraceEvent> ViolationsOf(
    const std::vector<TraceEvent>& events, ViolationKind kind) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events) {
    if (e.type == TraceEventType::kViolation && e.kind == kind) {
      out.push_back(e);
    }
  }
  return out;
}
inline int CountViolations(const std::vector<TraceEvent>& events) {
  int n = 0;
  for (const TraceEvent& e : events) n += e.type == TraceEventType::kViolation;
  return n;
}

}  // namespace kvcanary::testing

#endif  // KVCANARY_TESTS_INTEGRATION_CLUSTER_H_
