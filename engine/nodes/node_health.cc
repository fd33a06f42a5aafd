#include "engine/nodes/node_health.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "engine/nodes/node_common.h"
#include "engine/nodes/supervisor_status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"

namespace kvcanary::engine {
namespace {

using Probed = NodeHealth::Probed;

Probed ProbeUrl(const std::string& url, const tls::Context* tls) {
  std::unique_ptr<httplib::ClientImpl> client = NodeClient(url, tls);
  client->set_connection_timeout(0, 300 * 1000);
  client->set_read_timeout(1, 0);
  client->set_write_timeout(1, 0);
  auto res = client->Get("/health");
  if (res) return res->status == 200 ? Probed::kUp : Probed::kDown;
  return res.error() == httplib::Error::Connection ? Probed::kDown
                                                   : Probed::kTimedOut;
}

constexpr int kTimeoutsForDown = 3;
constexpr const char* kRoles[] = {"prefill", "decode", "router"};

}  // namespace

NodeHealth::NodeHealth(NodeHealthOptions options)
    : options_(std::move(options)),
      registry_(std::make_shared<prometheus::Registry>()) {
  auto& node_up = prometheus::BuildGauge()
                      .Name("kvcanary_router_node_up")
                      .Help(
                          "1 while the router's probes reach the node "
                          "(node: its index within the role)")
                      .Register(*registry_);
  absl::MutexLock lock(&mu_);
  for (const auto& [role, urls] :
       {std::pair<const char*, const std::vector<std::string>*>{
            "prefill", &options_.prefill_urls},
        {"decode", &options_.decode_urls}}) {
    for (const std::string& url : *urls) {
      Node n;
      n.role = role;
      n.index = static_cast<int>(&url - urls->data());
      n.url = url;
      n.up_gauge =
          &node_up.Add({{"role", role}, {"node", std::to_string(n.index)}});
      n.up_gauge->Set(1);
      nodes_.push_back(std::move(n));
      roles_.push_back(role);
      urls_.push_back(url);
    }
  }
  if (!options_.up_status_file.empty()) {
    auto& restarts =
        prometheus::BuildCounter()
            .Name("kvcanary_engine_restarts_total")
            .Help("Restarts of each role by kvcanary-engine up since it began")
            .Register(*registry_);
    for (const char* role : kRoles) {
      restarts_[role] = &restarts.Add({{"role", role}});
      restarts_seen_[role] = 0;
    }
  }
}

NodeHealth::~NodeHealth() { Stop(); }

void NodeHealth::Start() {
  prober_ = std::thread([this] { ProbeLoop(); });
}

void NodeHealth::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (prober_.joinable()) prober_.join();
}

void NodeHealth::Update(size_t index, Probed probed) {
  absl::MutexLock lock(&mu_);
  Node& n = nodes_[index];
  n.timeouts = probed == Probed::kTimedOut ? n.timeouts + 1 : 0;
  const bool up =
      probed == Probed::kUp ||
      (probed == Probed::kTimedOut && n.up && n.timeouts < kTimeoutsForDown);
  if (n.up && !up) n.down_since = absl::Now();
  n.up = up;
  n.up_gauge->Set(up ? 1 : 0);
}

void NodeHealth::ProbeLoop() {
  while (true) {
    for (size_t i = 0; i < urls_.size(); ++i)
      Update(i, ProbeUrl(urls_[i], options_.tls.get()));
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.probe_interval);
    if (stop_) return;
  }
}

absl::StatusOr<std::string> NodeHealth::PickOf(const std::string& role,
                                               uint64_t n) const {
  std::vector<const Node*> of_role;
  for (const Node& node : nodes_) {
    if (node.role == role) of_role.push_back(&node);
  }
  for (size_t i = 0; i < of_role.size(); ++i) {
    const Node* node = of_role[(n + i) % of_role.size()];
    if (node->up) return node->url;
  }
  return absl::UnavailableError(
      absl::StrCat("The ", role, " node is down (", of_role.size(), " of ",
                   of_role.size(), " not answering); retry shortly."));
}

absl::StatusOr<NodeHealth::Route> NodeHealth::Pick(uint64_t n) {
  for (int attempt = 0;; ++attempt) {
    std::string down_role;
    {
      absl::MutexLock lock(&mu_);
      auto prefill = PickOf("prefill", n);
      auto decode = PickOf("decode", n);
      if (prefill.ok() && decode.ok()) {
        return Route{*std::move(prefill), *std::move(decode)};
      }
      if (attempt > 0) return prefill.ok() ? decode.status() : prefill.status();
      down_role = prefill.ok() ? "decode" : "prefill";
    }
    // The prober may not have seen the node come back yet: ask now, so a
    // node is served as soon as it answers.
    for (size_t i = 0; i < urls_.size(); ++i) {
      if (roles_[i] == down_role)
        Update(i, ProbeUrl(urls_[i], options_.tls.get()));
    }
  }
}

namespace {

// "host:port" of a node URL ("http://host:port" or "https://host:port/").
std::string HostPort(absl::string_view url) {
  if (!absl::ConsumePrefix(&url, "https://"))
    absl::ConsumePrefix(&url, "http://");
  absl::ConsumeSuffix(&url, "/");
  return std::string(url);
}

// Replaces each "[http[s]://]host:<digits>" in *text: with the name
// `names` gives that host:port, else with "an internal address".
void RedactHost(absl::string_view host,
                const std::map<std::string, std::string>& names,
                std::string* text) {
  const std::string prefix = absl::StrCat(host, ":");
  size_t at = 0;
  while ((at = text->find(prefix, at)) != std::string::npos) {
    size_t end = at + prefix.size();
    while (end < text->size() &&
           absl::ascii_isdigit(static_cast<unsigned char>((*text)[end]))) {
      ++end;
    }
    if (end == at + prefix.size()) {
      at = end;
      continue;
    }
    auto it = names.find(text->substr(at, end - at));
    const std::string with =
        it != names.end() ? it->second : "an internal address";
    for (absl::string_view scheme : {"https://", "http://"}) {
      if (at >= scheme.size() &&
          absl::string_view(*text).substr(at - scheme.size(), scheme.size()) ==
              scheme) {
        at -= scheme.size();
        break;
      }
    }
    text->replace(at, end - at, with);
    at += with.size();
  }
}

}  // namespace

absl::Status NodeHealth::Redacted(const absl::Status& status) const {
  if (status.ok()) return status;
  // urls_ and roles_ are fixed at construction: no lock.
  std::map<std::string, std::string> names;  // host:port -> "decode-0"
  std::map<std::string, int> next_index;
  std::set<std::string> hosts;
  for (size_t i = 0; i < urls_.size(); ++i) {
    const std::string host_port = HostPort(urls_[i]);
    names[host_port] = absl::StrCat(roles_[i], "-", next_index[roles_[i]]++);
    hosts.insert(host_port.substr(0, host_port.rfind(':')));
  }
  std::string message(status.message());
  for (const std::string& host : hosts) RedactHost(host, names, &message);
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) {
        out.SetPayload(url, payload);
      });
  return out;
}

std::string NodeHealth::HealthJson(bool detailed) const {
  nlohmann::ordered_json j;
  j["status"] = "ok";
  j["role"] = "router";
  nlohmann::ordered_json nodes = nlohmann::ordered_json::array();
  {
    absl::MutexLock lock(&mu_);
    bool prefill_up = false, decode_up = false;
    for (const Node& n : nodes_) {
      nlohmann::ordered_json node = {{"role", n.role},
                                     {"node", n.index},
                                     {"url", n.url},
                                     {"state", n.up ? "up" : "down"}};
      if (!n.up) {
        node["down_ms"] = absl::ToInt64Milliseconds(absl::Now() - n.down_since);
      }
      nodes.push_back(std::move(node));
      (n.role == "prefill" ? prefill_up : decode_up) |= n.up;
    }
    if (!prefill_up || !decode_up) j["status"] = "degraded";
    j["roles"] = {{"prefill", prefill_up ? "up" : "down"},
                  {"decode", decode_up ? "up" : "down"}};
  }
  if (!detailed) return j.dump();
  j["nodes"] = std::move(nodes);
  if (!options_.up_status_file.empty()) {
    auto s = SupervisorStatus::ReadFile(options_.up_status_file);
    if (!s.ok()) {
      j["supervisor"] = {{"error", std::string(s.status().message())}};
    } else {
      std::string text;
      s->EncodeTo(&text);
      j["supervisor"] = nlohmann::ordered_json::parse(text);
      j["supervisor"].erase("format");
    }
  }
  return j.dump();
}

std::string NodeHealth::MetricsText() {
  absl::MutexLock lock(&metrics_mu_);
  if (!options_.up_status_file.empty()) {
    auto s = SupervisorStatus::ReadFile(options_.up_status_file);
    if (s.ok()) {
      for (const SupervisorStatus::Role& r : s->roles) {
        auto it = restarts_.find(r.role);
        if (it == restarts_.end()) continue;
        int64_t& seen = restarts_seen_[r.role];
        if (r.restarts > seen) {
          it->second->Increment(static_cast<double>(r.restarts - seen));
          seen = r.restarts;
        }
      }
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace kvcanary::engine
