// The pieces of `up`'s supervision that need no processes: the restart
// backoff, the ready line, exit descriptions, port pinning, and the status
// file the router reads.
#include "engine/nodes/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "engine/nodes/supervisor_status.h"
#include "gtest/gtest.h"

namespace kvcanary::engine {
namespace {

TEST(RestartBackoffTest, DoublesToTheMaximumAndResetsAfterAStableRun) {
  const RestartBackoff b;  // 100 ms doubling to 5 s, reset after 10 s up
  const absl::Duration brief = absl::Milliseconds(50);
  absl::Duration d = b.Next(absl::ZeroDuration(), brief);
  EXPECT_EQ(d, absl::Milliseconds(100));
  std::vector<int64_t> waits;
  for (int i = 0; i < 8; ++i) {
    waits.push_back(absl::ToInt64Milliseconds(d));
    d = b.Next(d, brief);
  }
  EXPECT_EQ(waits,
            (std::vector<int64_t>{100, 200, 400, 800, 1600, 3200, 5000, 5000}));
  EXPECT_EQ(b.Next(absl::Seconds(5), absl::Seconds(10)),
            absl::Milliseconds(100));
  EXPECT_EQ(b.Next(absl::Seconds(5), absl::Seconds(9)), absl::Seconds(5));
}

TEST(ReadyLineTest, ReadsThePortsOfANodesReadyLine) {
  auto decode = ParseReadyLine("ready role=decode http=4001 kv=4002");
  ASSERT_TRUE(decode.has_value());
  EXPECT_EQ(decode->http_port, 4001);
  EXPECT_EQ(decode->kv_port, 4002);
  auto router = ParseReadyLine("ready role=router http=8000");
  ASSERT_TRUE(router.has_value());
  EXPECT_EQ(router->kv_port, 0);
  EXPECT_FALSE(ParseReadyLine("loading model").has_value());
  EXPECT_FALSE(ParseReadyLine("ready role=router").has_value());
  EXPECT_FALSE(ParseReadyLine("ready role=router http=x").has_value());
}

TEST(DescribeExitTest, SignalOrCode) {
  const pid_t killed = fork();
  if (killed == 0) {
    pause();
    _exit(0);
  }
  kill(killed, SIGKILL);
  int status = 0;
  waitpid(killed, &status, 0);
  EXPECT_EQ(DescribeExit(status), "signal 9");
  const pid_t exited = fork();
  if (exited == 0) _exit(3);
  waitpid(exited, &status, 0);
  EXPECT_EQ(DescribeExit(status), "code 3");
}

ReadyLine Ports(int http, int kv) {
  ReadyLine r;
  r.http_port = http;
  r.kv_port = kv;
  return r;
}

TEST(PinPortsTest, ReplacesPortFlagsWithTheBoundPorts) {
  EXPECT_EQ(
      PinPorts({"--port=0", "--threads=2", "--kv_port=0"}, Ports(4001, 4002)),
      (std::vector<std::string>{"--threads=2", "--port=4001",
                                "--kv_port=4002"}));
  EXPECT_EQ(PinPorts({"--tenants=t.json"}, Ports(8000, 0)),
            (std::vector<std::string>{"--tenants=t.json", "--port=8000"}));
}

TEST(ReadyLineTest, APrefillNodeNamesItsKvEventSockets) {
  auto prefill = ParseReadyLine(
      "ready role=prefill http=4000 kv_events=tcp://127.0.0.1:4100 "
      "kv_events_replay=tcp://127.0.0.1:4101");
  ASSERT_TRUE(prefill.has_value());
  EXPECT_EQ(prefill->http_port, 4000);
  EXPECT_EQ(prefill->kv_events, "tcp://127.0.0.1:4100");
  EXPECT_EQ(prefill->kv_events_replay, "tcp://127.0.0.1:4101");
  EXPECT_EQ(ParseReadyLine("ready role=prefill http=4000")->kv_events, "");
}

TEST(PinPortsTest, KvEventSocketsKeepTheirBoundPorts) {
  ReadyLine ready = Ports(4000, 0);
  ready.kv_events = "tcp://127.0.0.1:4100";
  ready.kv_events_replay = "tcp://127.0.0.1:4101";
  EXPECT_EQ(
      PinPorts({"--port=0", "--kv_events=tcp://127.0.0.1:0",
                "--kv_events_replay=", "--kv_events_topic=t"},
               ready),
      (std::vector<std::string>{"--kv_events_topic=t", "--port=4000",
                                "--kv_events=tcp://127.0.0.1:4100",
                                "--kv_events_replay=tcp://127.0.0.1:4101"}));
  // Without a replay socket its flag ("off") stays as it was.
  ready.kv_events_replay.clear();
  EXPECT_EQ(
      PinPorts({"--kv_events=tcp://127.0.0.1:0", "--kv_events_replay=off"},
               ready),
      (std::vector<std::string>{"--kv_events_replay=off", "--port=4000",
                                "--kv_events=tcp://127.0.0.1:4100"}));
}

TEST(PinPortsTest, AnInheritedKvListenerIsNotPinnedToAPort) {
  EXPECT_EQ(PinPorts({"--port=0", "--kv_listen_fd=5"}, Ports(4001, 4002)),
            (std::vector<std::string>{"--kv_listen_fd=5", "--port=4001"}));
}

SupervisorStatus Example() {
  SupervisorStatus s;
  s.pid = 100;
  s.roles.push_back({"prefill", "up", 101, 4001, 0, std::nullopt});
  s.roles.push_back({"decode", "restarting", 0, 4002, 2, "signal 9"});
  return s;
}

TEST(SupervisorStatusTest, RoundTrips) {
  std::string text;
  Example().EncodeTo(&text);
  auto back = SupervisorStatus::Decode(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pid, 100);
  ASSERT_EQ(back->roles.size(), 2u);
  EXPECT_EQ(back->roles[0].role, "prefill");
  EXPECT_EQ(back->roles[0].state, "up");
  EXPECT_EQ(back->roles[0].pid, 101);
  EXPECT_EQ(back->roles[0].port, 4001);
  EXPECT_FALSE(back->roles[0].last_exit.has_value());
  EXPECT_EQ(back->roles[1].restarts, 2);
  EXPECT_EQ(back->roles[1].last_exit, "signal 9");
  std::string again;
  back->EncodeTo(&again);
  EXPECT_EQ(again, text);
}

TEST(SupervisorStatusTest, EveryTruncationIsDataLoss) {
  std::string text;
  Example().EncodeTo(&text);
  for (size_t n = 0; n < text.size(); ++n) {
    auto s = SupervisorStatus::Decode(text.substr(0, n));
    ASSERT_FALSE(s.ok()) << n;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << n;
  }
}

TEST(SupervisorStatusTest, CorruptionIsDataLoss) {
  for (const char* bad : {
           "[]",
           R"({"format": "other/1", "pid": 1, "roles": []})",
           R"({"format": "kvcanary-up-status/1", "roles": []})",
           R"({"format": "kvcanary-up-status/1", "pid": 1, "roles": [1]})",
           R"({"format": "kvcanary-up-status/1", "pid": 1, "roles": [
               {"role": "decode", "state": "up", "pid": -1, "port": 1,
                "restarts": 0, "last_exit": null}]})",
           R"({"format": "kvcanary-up-status/1", "pid": 1, "roles": [
               {"role": "decode", "state": "up", "pid": 1, "port": 1,
                "restarts": 0, "last_exit": 9}]})",
       }) {
    auto s = SupervisorStatus::Decode(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << bad;
  }
}

TEST(SupervisorStatusTest, WriteFileReplacesTheFileWhole) {
  const std::string path =
      ::testing::TempDir() + "/up-status-" + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(Example().WriteFile(path).ok());
  SupervisorStatus next = Example();
  next.roles[1].restarts = 3;
  ASSERT_TRUE(next.WriteFile(path).ok());
  auto read = SupervisorStatus::ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->roles[1].restarts, 3);
  EXPECT_NE(access((path + ".tmp").c_str(), F_OK), 0);
  std::remove(path.c_str());
  EXPECT_EQ(SupervisorStatus::ReadFile(path).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvcanary::engine
