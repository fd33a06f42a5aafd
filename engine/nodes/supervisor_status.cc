#include "engine/nodes/supervisor_status.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvcanary::engine {
namespace {

using nlohmann::json;

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed up status: ", what));
}

bool IsCount(const json& j, const char* field) {
  return j.contains(field) && j[field].is_number_unsigned();
}

}  // namespace

void SupervisorStatus::EncodeTo(std::string* out) const {
  nlohmann::ordered_json j;
  j["format"] = kSupervisorStatusFormat;
  j["pid"] = pid;
  j["roles"] = nlohmann::ordered_json::array();
  for (const Role& r : roles) {
    j["roles"].push_back(nlohmann::ordered_json{
        {"role", r.role},
        {"state", r.state},
        {"pid", r.pid},
        {"port", r.port},
        {"restarts", r.restarts},
        {"last_exit", r.last_exit.has_value()
                          ? nlohmann::ordered_json(*r.last_exit)
                          : nlohmann::ordered_json(nullptr)}});
  }
  out->append(j.dump());
}

absl::StatusOr<SupervisorStatus> SupervisorStatus::Decode(
    absl::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr,
                             /*allow_exceptions=*/false);
  if (!j.is_object()) return Malformed("not a JSON object");
  if (!j.contains("format") || j["format"] != kSupervisorStatusFormat) {
    return Malformed(absl::StrCat("format is not ", kSupervisorStatusFormat));
  }
  if (!IsCount(j, "pid") || !j.contains("roles") || !j["roles"].is_array()) {
    return Malformed("needs pid and roles");
  }
  SupervisorStatus s;
  s.pid = j["pid"].get<int64_t>();
  for (const json& r : j["roles"]) {
    if (!r.is_object() || !r.contains("role") || !r["role"].is_string() ||
        !r.contains("state") || !r["state"].is_string() || !IsCount(r, "pid") ||
        !IsCount(r, "port") || !IsCount(r, "restarts") ||
        !r.contains("last_exit") ||
        !(r["last_exit"].is_null() || r["last_exit"].is_string())) {
      return Malformed(
          "a role needs role, state, pid, port, restarts and "
          "last_exit");
    }
    Role role;
    role.role = r["role"].get<std::string>();
    role.state = r["state"].get<std::string>();
    role.pid = r["pid"].get<int64_t>();
    role.port = r["port"].get<int>();
    role.restarts = r["restarts"].get<int64_t>();
    if (r["last_exit"].is_string()) {
      role.last_exit = r["last_exit"].get<std::string>();
    }
    s.roles.push_back(std::move(role));
  }
  return s;
}

absl::Status SupervisorStatus::WriteFile(const std::string& path) const {
  std::string text;
  EncodeTo(&text);
  return WriteFileAtomically(path, text, 0644);
}

absl::StatusOr<SupervisorStatus> SupervisorStatus::ReadFile(
    const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ::kvcanary::ReadFile(path));
  return Decode(text);
}

}  // namespace kvcanary::engine
