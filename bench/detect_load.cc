// The swinging load's clients: completions of the `loadgen` tenant, sent
// back to back, with pauses or not at all, by the phase of a 12 s cycle.
#include "bench/detect_load.h"

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/random.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace kvcanary::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

}  // namespace

SwingingLoad::SwingingLoad(const std::string& router) {
  for (int i = 0; i < 8; ++i) {
    threads_.emplace_back([this, router, i] { Client(router, i); });
  }
}

SwingingLoad::~SwingingLoad() {
  stop_ = true;
  for (auto& t : threads_) t.join();
}

void SwingingLoad::Client(const std::string& router, int i) {
  httplib::Client client(router);
  client.set_read_timeout(30, 0);
  const httplib::Headers h = {{"Authorization", "Bearer sk-loadgen"}};
  const auto start = Clock::now();
  while (!stop_) {
    const double t =
        std::chrono::duration<double>(Clock::now() - start).count();
    const int phase = static_cast<int>(t / 4) % 3;  // idle, saturating, light
    if (phase == 0 || (phase == 2 && i > 0)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    json j;
    std::string prompt = absl::StrCat("load ", i, " ", RandomHex(4));
    for (int w = 0; w < 60; ++w) prompt += w % 2 ? " dog" : " ran";
    j["prompt"] = prompt;
    j["max_tokens"] = 24;
    j["temperature"] = 0;
    client.Post("/v1/completions", h, j.dump(), "application/json");
    ++requests_;
    if (phase == 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace kvcanary::bench
