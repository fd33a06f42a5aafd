// The HTTP server against raw sockets on loopback: what a plain client, a
// pipelining one, a streaming one and a hostile one see. The connection
// cap's tests are in http_server_state_test.cc.
#include "common/http_server.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/http_server_fixture.h"

namespace kvcanary::http {
namespace {

using testing::ExpectOpenAiError;
using testing::Get;
using ::testing::HasSubstr;
using testing::HttpServerTest;
using testing::PostRequest;
using testing::RawClient;
using testing::RawResponse;

TEST_F(HttpServerTest, AnswersGetAndPost) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/hello?x=1")));
  auto hello = client.Read();
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->status, 200);
  EXPECT_EQ(hello->body, "hello /hello?x=1");
  EXPECT_EQ(hello->headers["content-type"], "text/plain");
  EXPECT_EQ(hello->headers["server"], "kvcanary-test");
  // Keep-alive: the same connection serves the next request.
  ASSERT_TRUE(client.Send(absl::StrCat(
      "POST /echo HTTP/1.1\r\nHost: t\r\nX-Echo: shout\r\nContent-Length: 4\r\n"
      "\r\nbody")));
  auto echo = client.Read();
  ASSERT_TRUE(echo.has_value());
  EXPECT_EQ(echo->status, 200);
  EXPECT_EQ(echo->body, "body");
  EXPECT_EQ(echo->headers["x-echo"], "shout");
  EXPECT_EQ(echo->headers["x-remote"], "127.0.0.1");
  EXPECT_EQ(echo->headers["content-length"], "4");
}

TEST_F(HttpServerTest, LayerErrorsCarryTheErrorHandlersBody) {
  Options options;
  options.max_body_bytes = 1 << 20;
  options.max_header_bytes = 16 << 10;
  Serve(options);
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(Get("/nowhere")));
    ExpectOpenAiError(client.Read(), 404);
    // A 404 keeps the connection.
    ASSERT_TRUE(client.Send(PostRequest("/hello", "x")));
    auto r = client.Read();
    ExpectOpenAiError(r, 405);
    EXPECT_EQ(r->headers["allow"], "GET, HEAD");
  }
  {
    // Refused from Content-Length, before any of the body is sent.
    RawClient client(port_);
    ASSERT_TRUE(client.Send(
        "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n"));
    auto r = client.Read();
    ExpectOpenAiError(r, 413);
    EXPECT_EQ(r->headers["connection"], "close");
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(
        Get("/hello",
            absl::StrCat("X-Big: ", std::string(20 << 10, 'a'), "\r\n"))));
    ExpectOpenAiError(client.Read(), 431);
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send("\x16\x03\x01 garbage\r\n\r\n"));
    ExpectOpenAiError(client.Read(), 400);
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(Get("/throw")));
    ExpectOpenAiError(client.Read(), 500);
  }
}

// A client that sends the whole body anyway still reads its 413: the
// server drains what comes after the answer instead of resetting.
TEST_F(HttpServerTest, ABodyOverTheLimitSentAnywayStillReadsIts413) {
  Options options;
  options.max_body_bytes = 1 << 20;
  Serve(options);
  RawClient client(port_);
  const std::string body(2 << 20, 'a');
  ASSERT_TRUE(client.Send(PostRequest("/echo", body)));
  ExpectOpenAiError(client.Read(), 413);
}

TEST_F(HttpServerTest, AHandlersBodylessErrorGetsTheErrorHandlersBody) {
  Serve({}, [](Server& server) {
    server.Get("/teapot",
               [](const Request&, Response& res) { res.status = 418; });
    server.Get("/own", [](const Request&, Response& res) {
      res.status = 429;
      res.set_content("slow down", "text/plain");
    });
  });
  RawClient client(port_);
  ASSERT_TRUE(client.Send(absl::StrCat(Get("/teapot"), Get("/own"))));
  ExpectOpenAiError(client.Read(), 418);
  auto own = client.Read();
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->status, 429);
  EXPECT_EQ(own->body, "slow down");
}

TEST_F(HttpServerTest, TheNotFoundHandlerServesUnknownPathsOnly) {
  Serve({}, [](Server& server) {
    server.set_not_found_handler([](const Request& req, Response& res) {
      res.set_content(absl::StrCat("fallback ", req.method, " ", req.path),
                      "text/plain");
    });
  });
  RawClient client(port_);
  ASSERT_TRUE(client.Send(absl::StrCat(Get("/elsewhere?q=1"),
                                       PostRequest("/other", "x"),
                                       PostRequest("/hello", "x"))));
  auto get = client.Read();
  auto post = client.Read();
  auto known = client.Read();
  ASSERT_TRUE(get.has_value() && post.has_value() && known.has_value());
  EXPECT_EQ(get->body, "fallback GET /elsewhere");
  EXPECT_EQ(post->body, "fallback POST /other");
  EXPECT_EQ(known->status, 405);  // a known path keeps its methods
}

TEST_F(HttpServerTest, HeadAnswersAGetRouteWithoutItsBody) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(
      absl::StrCat("HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n", Get("/hello"))));
  ASSERT_TRUE(client.WaitFor("\r\n\r\n", absl::Seconds(5)));
  const std::string head =
      client.buffer().substr(0, client.buffer().find("\r\n\r\n") + 4);
  client.buffer().erase(0, head.size());
  EXPECT_THAT(head, HasSubstr("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Length: 12\r\n"));
  auto get = client.Read();  // the GET right after: no body in between
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->body, "hello /hello");
}

TEST_F(HttpServerTest, AnswersPipelinedRequestsInOrder) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(absl::StrCat(
      Get("/hello?n=1"), PostRequest("/echo", "two"), Get("/hello?n=3"))));
  auto first = client.Read();
  auto second = client.Read();
  auto third = client.Read();
  ASSERT_TRUE(first.has_value() && second.has_value() && third.has_value());
  EXPECT_EQ(first->body, "hello /hello?n=1");
  EXPECT_EQ(second->body, "two");
  EXPECT_EQ(third->body, "hello /hello?n=3");
}

TEST_F(HttpServerTest, TwoIoThreadsServeManyPipeliningClientsAtOnce) {
  Options options;
  options.io_threads = 2;
  options.handler_threads = 8;
  Serve(options);
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([this, c, &answered] {
      RawClient client(port_);
      std::string requests;
      for (int i = 0; i < 10; ++i) {
        requests += PostRequest("/echo", absl::StrCat(c, ":", i));
      }
      if (!client.Send(requests)) return;
      for (int i = 0; i < 10; ++i) {
        auto r = client.Read();
        if (!r.has_value() || r->body != absl::StrCat(c, ":", i)) return;
        answered.fetch_add(1);
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(answered.load(), 160);
}

TEST_F(HttpServerTest, StreamsEachChunkBeforeTheHandlerFinishes) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/stream")));
  ASSERT_TRUE(client.WaitFor("first\n", absl::Seconds(5))) << client.buffer();
  EXPECT_THAT(client.buffer(), HasSubstr("Transfer-Encoding: chunked\r\n"));
  EXPECT_THAT(client.buffer(), HasSubstr("Content-Type: text/event-stream"));
  Push("second\n");
  ASSERT_TRUE(client.WaitFor("second\n", absl::Seconds(5)));
  Finish();
  auto r = client.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "first\nsecond\n");
  EXPECT_EQ(WaitReleased(absl::Seconds(5)), std::optional<bool>(true));
  // The connection goes on after a streamed response.
  ASSERT_TRUE(client.Send(Get("/hello")));
  auto next = client.Read();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->status, 200);
}

TEST_F(HttpServerTest, AClientThatLeavesMidStreamFailsTheWrite) {
  ticks_ = true;
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/stream")));
  ASSERT_TRUE(client.WaitFor("first\n", absl::Seconds(5)));
  const absl::Time left = absl::Now();
  client.Close();
  EXPECT_EQ(WaitReleased(absl::Seconds(2)), std::optional<bool>(false));
  std::lock_guard<std::mutex> lock(mu_);
  ASSERT_TRUE(write_failed_at_.has_value());
  EXPECT_LT(*write_failed_at_ - left, absl::Seconds(1));
}

// A handler that waits on other work sees the client hang up before it
// answers (Request::is_connection_closed), and not while it is there.
TEST_F(HttpServerTest, AWaitingHandlerSeesItsClientHangUp) {
  std::promise<absl::Duration> noticed;
  std::atomic<bool> closed_at_start{true};
  Serve({}, [&](Server& s) {
    s.Get("/wait", [&](const Request& req, Response& res) {
      closed_at_start = req.is_connection_closed();
      const absl::Time start = absl::Now();
      while (!req.is_connection_closed() &&
             absl::Now() - start < absl::Seconds(10)) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      noticed.set_value(absl::Now() - start);
      res.set_content("late", "text/plain");
    });
  });
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/wait")));
  absl::SleepFor(absl::Milliseconds(200));
  client.Close();
  auto f = noticed.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const absl::Duration waited = f.get();
  EXPECT_FALSE(closed_at_start.load());
  EXPECT_GE(waited, absl::Milliseconds(150));  // not before it hung up
  EXPECT_LT(waited, absl::Seconds(5));
}

TEST_F(HttpServerTest, ASlowHeaderIsAnswered408WithinTheDeadline) {
  Options options;
  options.header_timeout = absl::Seconds(1);
  Serve(options);
  RawClient client(port_);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(client.Send("GET /hello HTTP/1.1\r\nX-Slow: "));
  // One byte every 200 ms: each read is quick, the whole is not.
  std::optional<RawResponse> r;
  for (int i = 0; i < 40 && !r.has_value(); ++i) {
    if (!client.Send("X")) break;  // closed
    r = client.Read(absl::Milliseconds(200));
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_LT(took, absl::Seconds(2.5));
  ExpectOpenAiError(r, 408);
}

TEST_F(HttpServerTest, SlowlorisDoesNotStopOthersBeingServed) {
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_cur < 2048) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 2048);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  Options options;
  options.handler_threads = 4;
  Serve(options);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 500; ++i) {
    slow.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(slow.back()->connected()) << i;
    ASSERT_TRUE(slow.back()->Send("GET /hello HTTP/1.1\r\nHost: t\r\n"));
  }
  const absl::Time start = absl::Now();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(Get("/hello")));
  auto r = client.Read(absl::Seconds(5));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST_F(HttpServerTest, ConnectionCloseAndHttp10EndTheConnection) {
  Serve();
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(Get("/hello", "Connection: close\r\n")));
    auto r = client.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->headers["connection"], "close");
    EXPECT_TRUE(client.WaitClosed(absl::Seconds(5)));
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send("GET /hello HTTP/1.0\r\n\r\n"));
    auto r = client.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(client.WaitClosed(absl::Seconds(5)));
  }
}

TEST_F(HttpServerTest, ExpectContinueGetsA100First) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(
      client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                  "Content-Length: 5\r\n\r\n"));
  ASSERT_TRUE(
      client.WaitFor("HTTP/1.1 100 Continue\r\n\r\n", absl::Seconds(5)));
  client.buffer().clear();
  ASSERT_TRUE(client.Send("hello"));
  auto r = client.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "hello");
}

TEST_F(HttpServerTest, ExpectContinueAsksTheHandlerBeforeThe100) {
  Serve({}, [](Server& server) {
    server.set_expect_continue_handler([](const Request& req, Response& res) {
      if (req.get_header_value("Authorization") == "good") return true;
      res.status = 401;
      return false;
    });
  });
  const std::string head =
      "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
      "Content-Length: 5\r\n";
  {
    // Refused from the headers: no 100, the error handler's body, closed.
    RawClient client(port_);
    ASSERT_TRUE(client.Send(head + "Authorization: bad\r\n\r\n"));
    auto r = client.Read();
    EXPECT_EQ(client.buffer().find("100 Continue"), std::string::npos);
    ExpectOpenAiError(r, 401);
    EXPECT_EQ(r->headers["connection"], "close");
  }
  {
    RawClient client(port_);
    ASSERT_TRUE(client.Send(head + "Authorization: good\r\n\r\n"));
    ASSERT_TRUE(
        client.WaitFor("HTTP/1.1 100 Continue\r\n\r\n", absl::Seconds(5)));
    client.buffer().clear();
    ASSERT_TRUE(client.Send("hello"));
    auto r = client.Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->body, "hello");
  }
  {
    // An unknown path is answered at once, without a 100 either.
    RawClient client(port_);
    ASSERT_TRUE(client.Send(
        "POST /nowhere HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
        "Authorization: good\r\nContent-Length: 5\r\n\r\n"));
    auto r = client.Read();
    EXPECT_EQ(client.buffer().find("100 Continue"), std::string::npos);
    ExpectOpenAiError(r, 404);
  }
}

TEST_F(HttpServerTest, TwoAuthorizationFieldsAreA400BeforeAnyHandler) {
  Serve();
  RawClient client(port_);
  ASSERT_TRUE(client.Send(
      Get("/hello", "Authorization: Bearer a\r\nauthorization: Bearer b\r\n")));
  auto r = client.Read();
  ExpectOpenAiError(r, 400);
  EXPECT_EQ(r->headers["connection"], "close");
  RawClient one(port_);
  ASSERT_TRUE(one.Send(Get("/hello", "Authorization: Bearer a\r\n")));
  auto ok = one.Read();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

// As a fake target that "dies" after a request: the request is answered,
// idle connections are closed, new ones refused.
TEST_F(HttpServerTest, StopListeningFromAHandlerStillAnswersIt) {
  Serve({}, [](Server& server) {
    server.Get("/die", [&server](const Request&, Response& res) {
      server.StopListening();
      res.set_content("bye", "text/plain");
    });
  });
  RawClient idle(port_);
  ASSERT_TRUE(idle.Send(Get("/hello")));
  ASSERT_TRUE(idle.Read().has_value());
  RawClient dying(port_);
  ASSERT_TRUE(dying.Send(Get("/die")));
  auto r = dying.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->body, "bye");
  EXPECT_EQ(r->headers["connection"], "close");
  EXPECT_TRUE(dying.WaitClosed(absl::Seconds(5)));
  EXPECT_TRUE(idle.WaitClosed(absl::Seconds(5)));
  RawClient late(port_);
  EXPECT_FALSE(late.connected());
}

TEST_F(HttpServerTest, StopClosesIdleAndStreamingConnectionsAndJoins) {
  ticks_ = true;
  Serve();
  RawClient idle(port_);
  ASSERT_TRUE(idle.Send(Get("/hello")));
  ASSERT_TRUE(idle.Read().has_value());
  RawClient partial(port_);
  ASSERT_TRUE(partial.Send("GET /hel"));
  RawClient streaming(port_);
  ASSERT_TRUE(streaming.Send(Get("/stream")));
  ASSERT_TRUE(streaming.WaitFor("first\n", absl::Seconds(5)));
  auto stopped = std::async(std::launch::async, [this] { server_->Stop(); });
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  EXPECT_TRUE(idle.WaitClosed(absl::Seconds(1)));
  EXPECT_TRUE(partial.WaitClosed(absl::Seconds(1)));
  EXPECT_TRUE(streaming.WaitClosed(absl::Seconds(1)));
  EXPECT_EQ(WaitReleased(absl::Seconds(1)), std::optional<bool>(false));
  server_->Stop();  // again: nothing to do
  RawClient late(port_);
  EXPECT_FALSE(late.connected());
}

}  // namespace
}  // namespace kvcanary::http
