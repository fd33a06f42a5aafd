// The HTTP server's connection cap (common/http_server_state.h) against raw
// sockets on loopback: who is refused at the cap, and whose connection is
// closed to make room.
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "gtest/gtest.h"
#include "tests/common/http_server_fixture.h"

namespace kvcanary::http {
namespace {

using testing::ExpectOpenAiError;
using testing::Get;
using testing::HttpServerTest;
using testing::RawClient;
using testing::RawResponse;

TEST_F(HttpServerTest, OverTheConnectionCapWithNoRoomToMakeIs503) {
  Options options;
  options.max_connections = 4;
  options.max_unoccupied_per_address = 4;
  Serve(options);
  // Four connections that have not finished a request, from an address
  // within its share: none is closed to make room.
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(held.back()->Send("GET /hello HTTP/1.1\r\n"));
  }
  absl::SleepFor(absl::Milliseconds(200));  // all four accepted
  RawClient fifth(port_);
  ASSERT_TRUE(fifth.Send(Get("/hello")));
  auto r = fifth.Read();
  ExpectOpenAiError(r, 503);
  EXPECT_TRUE(fifth.WaitClosed(absl::Seconds(5)));
  // The held ones are still served.
  ASSERT_TRUE(held[0]->Send("Host: t\r\n\r\n"));
  auto first = held[0]->Read();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status, 200);
  // A place freed is a place taken.
  held.pop_back();
  std::optional<RawResponse> later;
  for (int i = 0; i < 50; ++i) {
    RawClient again(port_);
    ASSERT_TRUE(again.Send(Get("/hello")));
    later = again.Read();
    if (later.has_value() && later->status == 200) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->status, 200);
}

TEST_F(HttpServerTest, AtTheCapAnAddressOverItsShareLosesItsLongestIdle) {
  Options options;
  options.max_connections = 4;
  options.max_unoccupied_per_address = 2;
  Serve(options);
  // Another machine keeps four connections alive between requests.
  std::vector<std::unique_ptr<RawClient>> kept;
  for (int i = 0; i < 4; ++i) {
    kept.push_back(std::make_unique<RawClient>(port_, nullptr, "127.0.0.2"));
    ASSERT_TRUE(kept.back()->Send(Get("/hello")));
    auto r = kept.back()->Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
    absl::SleepFor(absl::Milliseconds(20));  // an order of idleness
  }
  RawClient fifth(port_);
  ASSERT_TRUE(fifth.Send(Get("/hello")));
  auto r = fifth.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  // The first kept connection, idle longest, was closed; the last was not.
  EXPECT_TRUE(kept[0]->WaitClosed(absl::Seconds(5)));
  ASSERT_TRUE(kept[3]->Send(Get("/hello")));
  auto last = kept[3]->Read();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->status, 200);
  EXPECT_EQ(server_->connection_stats().evicted_idle, 1u);
}

TEST_F(HttpServerTest, KeptConnectionsWithinTheirShareAreNotClosedForRoom) {
  Options options;
  options.max_connections = 4;
  Serve(options);
  std::vector<std::unique_ptr<RawClient>> kept;
  for (int i = 0; i < 4; ++i) {
    kept.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(kept.back()->Send(Get("/hello")));
    ASSERT_TRUE(kept.back()->Read().has_value());
  }
  RawClient fifth(port_, nullptr, "127.0.0.2");
  ASSERT_TRUE(fifth.Send(Get("/hello")));
  ExpectOpenAiError(fifth.Read(), 503);
  for (auto& client : kept) {
    ASSERT_TRUE(client->Send(Get("/hello")));
    auto r = client->Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_EQ(server_->connection_stats().refused_cap, 1u);
}

TEST_F(HttpServerTest, AnAddressOverItsShareOfSilentConnectionsGivesWay) {
  Options options;
  options.max_connections = 8;
  options.max_unoccupied_per_address = 2;
  Serve(options);
  // Another machine holds every place with connections that send nothing.
  std::vector<std::unique_ptr<RawClient>> silent;
  for (int i = 0; i < 8; ++i) {
    silent.push_back(std::make_unique<RawClient>(port_, nullptr, "127.0.0.2"));
    ASSERT_TRUE(silent.back()->connected());
  }
  absl::SleepFor(absl::Milliseconds(200));  // all eight accepted
  // This machine's connections are let in: the oldest silent ones make
  // room for them, even before their requests are complete.
  std::vector<std::unique_ptr<RawClient>> ours;
  for (int i = 0; i < 2; ++i) {
    ours.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(ours.back()->Send("GET /hello HTTP/1.1\r\n"));
    EXPECT_TRUE(silent[i]->WaitClosed(absl::Seconds(5))) << i;
  }
  // The crowding machine's next connection is refused.
  RawClient more(port_, nullptr, "127.0.0.2");
  ASSERT_TRUE(more.Send(Get("/hello")));
  ExpectOpenAiError(more.Read(), 503);
  for (auto& client : ours) {
    ASSERT_TRUE(client->Send("Host: t\r\n\r\n"));
    auto r = client->Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
  }
  const ConnectionStats stats = server_->connection_stats();
  EXPECT_EQ(stats.evicted_pending, 2u);
  EXPECT_EQ(stats.refused_address, 1u);
}

}  // namespace
}  // namespace kvcanary::http
