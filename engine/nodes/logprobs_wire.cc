#include "engine/nodes/logprobs_wire.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvcanary::engine {
namespace {

nlohmann::json Number(float f) { return static_cast<double>(f); }

bool ReadToken(const nlohmann::json& j, int vocab_size, int* out) {
  if (!j.is_number_unsigned()) return false;
  const uint64_t t = j.get<uint64_t>();
  if (t >= static_cast<uint64_t>(vocab_size)) return false;
  *out = static_cast<int>(t);
  return true;
}

bool ReadLogprob(const nlohmann::json& j, float* out) {
  if (!j.is_number()) return false;
  const double v = j.get<double>();
  if (!(v <= 0.0)) return false;  // NaN too
  *out = static_cast<float>(v);
  return true;
}

bool ReadPosition(const nlohmann::json& p, int vocab_size, TokenLogprobs* out) {
  if (!p.is_array() || p.size() != 3 || !p[2].is_array() ||
      p[2].size() > static_cast<size_t>(kMaxTopLogprobs)) {
    return false;
  }
  // token -1: a position another node computed (never sent).
  if (!ReadToken(p[0], vocab_size, &out->token) ||
      !ReadLogprob(p[1], &out->logprob)) {
    return false;
  }
  for (const nlohmann::json& alt : p[2]) {
    std::pair<int, float> a;
    if (!alt.is_array() || alt.size() != 2 ||
        !ReadToken(alt[0], vocab_size, &a.first) ||
        !ReadLogprob(alt[1], &a.second)) {
      return false;
    }
    out->top.push_back(a);
  }
  return true;
}

}  // namespace

nlohmann::json LogprobsToJson(const std::vector<TokenLogprobs>& positions) {
  nlohmann::json out = nlohmann::json::array();
  for (const TokenLogprobs& p : positions) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, lp] : p.top) top.push_back({id, Number(lp)});
    out.push_back({p.token, Number(p.logprob), std::move(top)});
  }
  return out;
}

absl::StatusOr<std::vector<TokenLogprobs>> LogprobsFromJson(
    const nlohmann::json& j, int vocab_size, const char* what,
    bool null_is_unknown) {
  if (!j.is_array()) {
    return absl::DataLossError(absl::StrCat(what, " is not an array"));
  }
  std::vector<TokenLogprobs> out(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    if (null_is_unknown && j[i].is_null()) continue;
    if (!ReadPosition(j[i], vocab_size, &out[i])) {
      return absl::DataLossError(
          absl::StrCat(what, "[", i, "] is not a valid position"));
    }
  }
  return out;
}

}  // namespace kvcanary::engine
