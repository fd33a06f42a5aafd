// The router's keep-alive connections to a decode node (NodePool) and the
// stream read over them (DecodeStream), against a real HTTP server that
// answers POST /internal/v1/generate as the decode node does: NDJSON lines,
// chunked, after a delay the test sets.
#include "engine/nodes/decode_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/http_server.h"
#include "engine/nodes/accepted_requests.h"
#include "engine/nodes/node_pool.h"
#include "engine/nodes/openai_errors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

// Answers each request with {"echo": <its body's "n">} then a final line,
// `delay` after it arrived, and `gap` between the two lines.
class FakeDecodeNode {
 public:
  explicit FakeDecodeNode(http::Options options = {}) : server_(options) {
    server_.Post("/internal/v1/generate", [this](const http::Request& req,
                                                 http::Response& res) {
      ++requests_;
      absl::SleepFor(delay_.load() * absl::Milliseconds(1));
      const auto body = nlohmann::json::parse(req.body);
      const std::string first =
          nlohmann::json{{"echo", body["n"]}}.dump() + "\n";
      const std::string last =
          nlohmann::json{{"finish_reason", "length"}}.dump() + "\n";
      const absl::Duration gap = gap_.load() * absl::Milliseconds(1);
      res.set_chunked_content_provider(
          "application/x-ndjson",
          [this, first, last, gap](size_t, http::DataSink& sink) {
            sink.write(first.data(), first.size());
            absl::SleepFor(gap);
            ++last_lines_;
            sink.write(last.data(), last.size());
            sink.done();
            return true;
          },
          nullptr);
    });
    port_ = server_.Bind("127.0.0.1", 0).value();
    server_.Start();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  void set_delay_ms(int ms) { delay_ = ms; }
  void set_gap_ms(int ms) { gap_ = ms; }
  int requests() const { return requests_.load(); }
  // Final lines it has started to write.
  int last_lines() const { return last_lines_.load(); }

 private:
  http::Server server_;
  int port_ = 0;
  std::atomic<int> delay_{0};
  std::atomic<int> gap_{0};
  std::atomic<int> last_lines_{0};
  std::atomic<int> requests_{0};
};

std::string Body(int n) { return nlohmann::json{{"n", n}}.dump(); }

// The "echo" of the stream's first line; -1 if it failed or had none.
int Echo(DecodeStream& stream) {
  if (!stream.WaitHeaders().ok()) return -1;
  std::optional<nlohmann::json> line = stream.Next();
  if (!line.has_value() || !line->contains("echo")) return -1;
  return (*line)["echo"].get<int>();
}

// Sends request `n` while the node holds its answer back (2 s: a loaded
// machine must not let it arrive before the give-up), and
// gives it up once the node has it: after it was sent, before its headers.
void GiveUpWhileWaiting(FakeDecodeNode& node, NodePool& pool, int n) {
  node.set_delay_ms(2000);
  const int before = node.requests();
  {
    DecodeStream stream(node.url(), "Bearer x", Body(n), absl::Seconds(10),
                        &pool);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (node.requests() == before && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    stream.Cancel();
    const absl::Status headers = stream.WaitHeaders();
    EXPECT_TRUE(absl::IsCancelled(headers)) << headers;
  }
  node.set_delay_ms(0);
}

int Ask(const FakeDecodeNode& node, NodePool& pool, int n) {
  DecodeStream stream(node.url(), "Bearer x", Body(n), absl::Seconds(10),
                      &pool);
  const int echo = Echo(stream);
  while (stream.Next().has_value()) {
  }
  return echo;
}

TEST(NodePoolTest, AStreamReadToItsEndLeavesItsConnectionToTheNext) {
  FakeDecodeNode node;
  NodePool pool(NodePoolOptions{});
  for (int i = 1; i <= 5; ++i) EXPECT_EQ(Ask(node, pool, i), i);
  EXPECT_EQ(pool.opened(), 1u);
  EXPECT_EQ(pool.reused(), 4u);
}

TEST(NodePoolTest, WithNoIdleConnectionsKeptEachRequestOpensItsOwn) {
  FakeDecodeNode node;
  NodePoolOptions options;
  options.max_idle_per_node = 0;
  NodePool pool(options);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Ask(node, pool, i), i);
  EXPECT_EQ(pool.opened(), 3u);
  EXPECT_EQ(pool.reused(), 0u);
}

// The headers and each line are taken as they arrive, not when the answer
// ends.
TEST(NodePoolTest, HeadersAndLinesArriveAsTheyAreSent) {
  FakeDecodeNode node;
  node.set_gap_ms(2000);
  NodePool pool(NodePoolOptions{});
  DecodeStream stream(node.url(), "Bearer x", Body(1), absl::Seconds(10),
                      &pool);
  EXPECT_EQ(Echo(stream), 1);
  EXPECT_EQ(node.last_lines(), 0);         // read before the node sent the rest
  ASSERT_TRUE(stream.Next().has_value());  // the final line, after the gap
  EXPECT_EQ(node.last_lines(), 1);
  EXPECT_FALSE(stream.Next().has_value());
}

// Given up while the node still works on it: the connection is closed, so
// the next request gets a new one and its own answer.
TEST(NodePoolTest, AGivenUpRequestsConnectionIsClosedNotReused) {
  FakeDecodeNode node;
  NodePool pool(NodePoolOptions{});
  EXPECT_EQ(Ask(node, pool, 1), 1);
  GiveUpWhileWaiting(node, pool, 2);
  EXPECT_EQ(Ask(node, pool, 3), 3);
  EXPECT_EQ(Ask(node, pool, 4), 4);
  EXPECT_EQ(pool.opened(), 2u);
}

// cancel-reuse-channel: the given-up request's connection goes back as it
// is, and the next request on it reads the given-up answer as its own; the
// one after it, the answer before its own.
TEST(NodePoolTest, WithTheFaultTheNextRequestReadsTheGivenUpAnswer) {
  FakeDecodeNode node;
  NodePoolOptions options;
  options.reuse_cancelled = true;
  NodePool pool(options);
  EXPECT_EQ(Ask(node, pool, 1), 1);
  GiveUpWhileWaiting(node, pool, 2);
  EXPECT_EQ(Ask(node, pool, 3), 2);
  EXPECT_EQ(Ask(node, pool, 4), 3);
  EXPECT_EQ(pool.opened(), 1u);
}

// Bytes that arrive on an idle connection (here: an answer nobody read)
// make it unusable: a healthy pool closes it instead of handing it out; the
// fault's pool hands it out, and the next request reads that answer.
TEST(NodePoolTest, AnIdleConnectionWithBytesOnItIsNotHandedOut) {
  FakeDecodeNode node;
  const std::string request = absl::StrCat(
      "POST /internal/v1/generate HTTP/1.1\r\nHost: x\r\nContent-Length: ",
      Body(7).size(), "\r\n\r\n", Body(7));
  for (const bool fault : {false, true}) {
    SCOPED_TRACE(fault ? "with the fault" : "healthy");
    NodePoolOptions options;
    options.reuse_cancelled = fault;
    NodePool pool(options);
    ASSERT_EQ(Ask(node, pool, 1), 1);
    absl::StatusOr<NodePool::Lease> lease =
        pool.Acquire(node.url(), absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(lease.ok());
    EXPECT_TRUE(lease->reused);
    ASSERT_TRUE(
        lease->connection->Write(request, absl::Now() + absl::Seconds(5), -1)
            .ok());
    absl::SleepFor(absl::Milliseconds(200));  // the answer arrives, unread
    EXPECT_FALSE(lease->connection->Quiet());
    pool.Release(node.url(), std::move(lease->connection));
    EXPECT_EQ(Ask(node, pool, 8), fault ? 7 : 8);
    EXPECT_EQ(pool.opened(), fault ? 1u : 2u);
  }
}

// Nor does a healthy pool keep a connection with bytes read past an answer.
TEST(NodePoolTest, AConnectionWithBytesLeftOverIsNotKept) {
  FakeDecodeNode node;
  NodePool pool(NodePoolOptions{});
  absl::StatusOr<NodePool::Lease> lease =
      pool.Acquire(node.url(), absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(lease.ok());
  lease->connection->buffer() = "left over";
  pool.Release(node.url(), std::move(lease->connection));
  EXPECT_EQ(Ask(node, pool, 9), 9);
  EXPECT_EQ(pool.opened(), 2u);
}

// A kept connection the node has closed (its idle timeout) is replaced,
// and the request goes through once.
TEST(NodePoolTest, AConnectionTheNodeClosedIsReplaced) {
  http::Options options;
  options.idle_timeout = absl::Milliseconds(100);
  FakeDecodeNode node(options);
  NodePool pool(NodePoolOptions{});
  EXPECT_EQ(Ask(node, pool, 1), 1);
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_EQ(Ask(node, pool, 2), 2);
  EXPECT_EQ(pool.opened(), 2u);
  EXPECT_EQ(node.requests(), 2);
}

TEST(NodePoolTest, AnUnreachableNodeFailsTheStreamNamingIt) {
  NodePool pool(NodePoolOptions{});
  FakeDecodeNode* gone = new FakeDecodeNode();
  const std::string url = gone->url();
  delete gone;
  DecodeStream stream(url, "Bearer x", Body(1), absl::Seconds(2), &pool);
  const absl::Status status = stream.WaitHeaders();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_NE(status.message().find(url), std::string::npos) << status;
}

// A node that reads the request and closes without a byte of answer gave
// no answer: the stream fails (it is not an empty 200, which Beast's parser
// would make of the bare end of the stream).
TEST(NodePoolTest, AConnectionClosedBeforeAnyAnswerIsNoAnswer) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)),
            0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len),
            0);
  std::thread closer([listener] {
    const int c = ::accept(listener, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    (void)!::recv(c, buf, sizeof(buf), 0);  // the request
    ::close(c);
  });
  NodePool pool(NodePoolOptions{});
  DecodeStream stream(absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port)),
                      "Bearer x", Body(1), absl::Seconds(5), &pool);
  const absl::Status status = stream.WaitHeaders();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  closer.join();
  ::close(listener);
}

// A decode node on a raw socket that keeps the real node's memory of
// accepted request ids (AcceptedRequests) and counts the requests it starts
// work on. It answers the first request on its first connection and keeps
// the connection; the next request on it is read, its work started, and the
// connection closed without a byte of answer (a node that is stopping).
// Every later request gets what the real node answers: 409 for an id it
// accepted already, else an answer.
class StoppingDecodeNode {
 public:
  StoppingDecodeNode() {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(
        ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(listener_, 8), 0);
    socklen_t len = sizeof(addr);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~StoppingDecodeNode() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  // Requests whose work was started, per id.
  int started(int id) const {
    absl::MutexLock lock(&mu_);
    auto it = started_.find(id);
    return it == started_.end() ? 0 : it->second;
  }

 private:
  void Serve() {
    for (int connection = 0;; ++connection) {
      const int c = ::accept(listener_, nullptr, nullptr);
      if (c < 0) return;
      for (int request = 0;; ++request) {
        const int id = ReadRequest(c);
        if (id < 0) break;
        if (!accepted_.Accept(RequestId(id), absl::Now())) {
          Send(c, "409 Conflict",
               R"({"error":{"message":"accepted already","code":6}})");
          continue;
        }
        {
          absl::MutexLock lock(&mu_);
          ++started_[id];
        }
        if (connection == 0 && request == 1) break;  // stopping: no answer
        Send(c, "200 OK",
             nlohmann::json{{"echo", id}}.dump() + "\n" +
                 nlohmann::json{{"finish_reason", "length"}}.dump() + "\n");
      }
      ::close(c);
    }
  }
  // The "n" of the next request's body on `c`; -1 at its end.
  int ReadRequest(int c) {
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Receive(c)) return -1;
    }
    const size_t at = buffer_.find("Content-Length: ");
    const size_t length =
        at < head_end ? std::stoul(buffer_.substr(at + 16)) : 0;
    while (buffer_.size() < head_end + 4 + length) {
      if (!Receive(c)) return -1;
    }
    const auto body =
        nlohmann::json::parse(buffer_.substr(head_end + 4, length));
    buffer_.erase(0, head_end + 4 + length);
    return body["n"].get<int>();
  }
  bool Receive(int c) {
    char chunk[4096];
    const ssize_t n = ::recv(c, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      buffer_.clear();
      return false;
    }
    buffer_.append(chunk, n);
    return true;
  }
  static void Send(int c, const std::string& status, const std::string& body) {
    const std::string answer =
        absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Length: ", body.size(),
                     "\r\nContent-Type: application/json\r\n\r\n", body);
    (void)!::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
  }

  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::string buffer_;  // the serving thread's
  AcceptedRequests accepted_;
  mutable absl::Mutex mu_;
  std::map<int, int> started_ ABSL_GUARDED_BY(mu_);
};

// The router resends a request whose kept connection closed before any
// answer; the node had read it, and runs it once: the resend is refused
// (409), and the client is answered 502.
TEST(NodePoolTest, ARequestTheNodeReadBeforeClosingItsConnectionRunsOnce) {
  StoppingDecodeNode node;
  NodePool pool(NodePoolOptions{});
  {
    DecodeStream first(node.url(), "Bearer x", Body(1), absl::Seconds(10),
                       &pool);
    EXPECT_EQ(Echo(first), 1);
    while (first.Next().has_value()) {
    }
  }
  EXPECT_EQ(pool.opened(), 1u);
  DecodeStream second(node.url(), "Bearer x", Body(2), absl::Seconds(10),
                      &pool);
  const absl::Status status = second.WaitHeaders();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_EQ(HttpStatusFor(status.code()), 502);
  EXPECT_EQ(pool.opened(), 2u);  // sent again, on a new connection
  EXPECT_EQ(node.started(2), 1);
  // A request sent once is served as ever.
  DecodeStream third(node.url(), "Bearer x", Body(3), absl::Seconds(10), &pool);
  EXPECT_EQ(Echo(third), 3);
  EXPECT_EQ(node.started(3), 1);
}

}  // namespace
}  // namespace kvcanary::engine
