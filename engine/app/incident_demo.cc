#include "engine/app/incident_demo.h"

#include <unistd.h>

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "common/temp_dir.h"
#include "engine/nodes/serve.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

struct Reply {
  int status = 0;
  nlohmann::json body;
};

Reply Complete(const std::string& router, const std::string& key,
               const std::string& prompt, int max_tokens) {
  httplib::Client client(router);
  client.set_read_timeout(120, 0);
  nlohmann::json j;
  j["prompt"] = prompt;
  j["max_tokens"] = max_tokens;
  j["temperature"] = 0;
  auto res =
      client.Post("/v1/completions", {{"Authorization", "Bearer " + key}},
                  j.dump(), "application/json");
  Reply r;
  if (!res) return r;
  r.status = res->status;
  r.body = nlohmann::json::parse(res->body, nullptr, false);
  return r;
}

// kind -> writer tenant -> count, from the decode node's metrics.
std::map<std::string, std::map<std::string, double>> Violations(
    const std::string& node) {
  std::map<std::string, std::map<std::string, double>> out;
  httplib::Client client(node);
  auto res = client.Get("/metrics");
  if (!res) return out;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (!absl::StartsWith(line, "kvcanary_node_watermark_violations_total{"))
      continue;
    auto field = [&](absl::string_view key) {
      const size_t at = line.find(absl::StrCat(key, "=\""));
      if (at == absl::string_view::npos) return std::string();
      const size_t start = at + key.size() + 2;
      return std::string(line.substr(start, line.find('"', start) - start));
    };
    double v = 0;
    (void)absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v);
    out[field("kind")][field("writer_tenant")] += v;
  }
  return out;
}

std::string LongPrompt(int words) {
  std::string p = "Once upon a time";
  for (int i = 0; i < words; ++i) p += i % 3 ? " the little dog ran" : " and";
  return p;
}

constexpr int kLongWords =
    66;  // well past the prefill tier's limit, within the context

// One incident run's line: acme's answer, and what the decode node's
// metrics recorded.
void PrintIncidentRun(
    const char* mode, const Reply& r,
    const std::map<std::string, std::map<std::string, double>>& violations,
    FILE* out) {
  std::fprintf(out,
               "\nfault admission-abort-lost, watermark=%s: acme's over-long "
               "prompt -> HTTP %d",
               mode, r.status);
  if (r.status == 200 && r.body.is_object()) {
    // The demo's own synthetic tenants: their text may be shown.
    const std::string text = r.body["choices"][0]["text"].get<std::string>();
    std::fprintf(out,
                 ", prompt_tokens=%d, completion_tokens=%d, text: \"%s...\"",
                 r.body["usage"]["prompt_tokens"].get<int>(),
                 r.body["usage"]["completion_tokens"].get<int>(),
                 text.substr(0, 60).c_str());
  } else if (r.body.is_object() && r.body.contains("error")) {
    std::fprintf(out, ", error: %s",
                 r.body["error"]["message"].get<std::string>().c_str());
  }
  std::fprintf(out, "\n");
  if (violations.empty())
    std::fprintf(out, "  decode node: no watermark violations recorded\n");
  for (const auto& [kind, writers] : violations) {
    for (const auto& [writer, count] : writers) {
      if (writer == "0") {
        std::fprintf(out,
                     "  decode node: %s x%.0f, slots never written in this "
                     "generation\n",
                     kind.c_str(), count);
      } else {
        std::fprintf(out,
                     "  decode node: %s x%.0f, bytes written by tenant %s, "
                     "read by acme\n",
                     kind.c_str(), count, writer.c_str());
      }
    }
  }
}

}  // namespace

absl::Status RunIncidentDemo(const std::vector<std::string>& model_args,
                             FILE* out) {
  // The demo's tenants file, in a private directory removed on return.
  ASSIGN_OR_RETURN(const TempDir dir, TempDir::Create("kvcanary-demo"));
  const std::string tenants = dir.File("tenants.json");
  RETURN_IF_ERROR(WriteFileAtomically(tenants, R"({"tenants": [
      {"id": "acme", "api_keys": ["sk-acme-demo"]},
      {"id": "globex", "api_keys": ["sk-globex-demo"]}]})",
                                      0644));
  std::fprintf(out,
               "\n== disaggregated: router + prefill + decode processes, "
               "tenants acme (1) "
               "and globex (2) ==\n");
  bool leak_unnoticed = false;
  for (const char* mode : {"off", "detect", "enforce"}) {
    std::vector<std::string> args = {
        "--port=0", "--tenants=" + tenants, "--fault=admission-abort-lost",
        absl::StrCat("--watermark=", mode), "--num_pages=128"};
    args.insert(args.end(), model_args.begin(), model_args.end());
    ASSIGN_OR_RETURN(UpProcess up, StartUpProcess(args));
    // globex's requests leave its K/V in pages the pool hands out next.
    for (int i = 0; i < 3; ++i) {
      Complete(up.router, "sk-globex-demo",
               absl::StrCat("The little dog ", i, " ran"), 24);
    }
    Reply r = Complete(up.router, "sk-acme-demo", LongPrompt(kLongWords), 24);
    auto violations = Violations(up.decode);
    PrintIncidentRun(mode, r, violations, out);
    if (std::string(mode) == "off") {
      std::fprintf(out,
                   "  (the incident's signature: 200, the real prompt_tokens, "
                   "an answer, "
                   "no error, no log line)\n");
    } else if (violations["foreign_tenant_read"]["2"] == 0) {
      leak_unnoticed = true;
    }
    StopUpProcess(up);
  }
  // The same workload, fault off.
  std::vector<std::string> args = {"--port=0", "--tenants=" + tenants,
                                   "--watermark=detect", "--num_pages=128"};
  args.insert(args.end(), model_args.begin(), model_args.end());
  ASSIGN_OR_RETURN(UpProcess up, StartUpProcess(args));
  int ok = 0;
  for (int i = 0; i < 16; ++i) {
    Reply r = Complete(up.router, i % 2 ? "sk-acme-demo" : "sk-globex-demo",
                       absl::StrCat("The little dog ", i, " ran"), 24);
    ok += r.status == 200;
  }
  Reply over = Complete(up.router, "sk-acme-demo", LongPrompt(kLongWords), 24);
  auto violations = Violations(up.decode);
  StopUpProcess(up);
  std::remove(tenants.c_str());
  std::fprintf(out,
               "\nfault off, watermark=detect: %d/16 requests served, "
               "over-long prompt -> HTTP %d "
               "(%s), %zu kinds of watermark violation\n\n",
               ok, over.status,
               over.body.is_object() && over.body.contains("error")
                   ? over.body["error"].value("code", "").c_str()
                   : "",
               violations.size());
  if (leak_unnoticed) return absl::InternalError("a leak went unnoticed");
  if (ok != 16 || over.status != 400 || !violations.empty()) {
    return absl::InternalError("the clean run was not clean");
  }
  return absl::OkStatus();
}

}  // namespace kvcanary::engine
