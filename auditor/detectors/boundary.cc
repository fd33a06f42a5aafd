#include "auditor/detectors/boundary.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "auditor/detectors/registry.h"
#include "auditor/target/limits.h"
#include "auditor/target/multi_client.h"

namespace kvcanary::auditor {

std::vector<Finding> JudgeBoundary(const BoundaryObservation& o) {
  std::vector<Finding> out;
  if (o.http_status != 200 || !o.answered) return out;
  auto make = [&o](const char* kind) {
    Finding f;
    f.detector = "boundary";
    f.kind = kind;
    f.severity = Severity::kHigh;
    f.reader = o.tenant;
    f.group = {{"template", o.template_name}};
    f.detail = {{"tenant", o.tenant},
                {"template", o.template_name},
                {"predicted_prompt_tokens", o.predicted_prompt_tokens},
                {"limit", o.limit},
                {"reported_prompt_tokens", o.reported_prompt_tokens},
                {"http_status", o.http_status}};
    return f;
  };
  if (o.limit > 0 && o.predicted_prompt_tokens - o.tolerance > o.limit) {
    out.push_back(make("boundary_accepted"));
  }
  if (o.reported_prompt_tokens >= 0) {
    const int diff = o.reported_prompt_tokens - o.predicted_prompt_tokens;
    if (diff < -o.tolerance) {
      out.push_back(make("prompt_truncated"));
    } else if (diff > o.tolerance) {
      out.push_back(make("prompt_tokens_mismatch"));
    }
  }
  return out;
}

namespace {

// A canned answer, as the wire would bring it.
ProbeResponse Canned(int status, std::string body) {
  ProbeResponse r;
  r.status = status;
  r.body = std::move(body);
  r.first_byte = absl::Milliseconds(1);
  r.total = absl::Milliseconds(2);
  return r;
}

class BoundaryDetector : public DetectorOf<BoundaryDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "boundary";
    s.summary =
        "a prompt past the input limit answered, or a prompt the target "
        "processed only in part";
    s.unit = "answers judged at and past the limit";
    s.order = 40;
    s.probes = {{ProbeKind::kAtLimit, 0.5}, {ProbeKind::kPastLimit, 0.5}};
    return s;
  }
  void Judge(const Probe& p, const Completion& c, const std::vector<Finding>&,
             FindingSink& out) override {
    if (p.kind == ProbeKind::kPlant) {
      JudgePlant(p, c, out);
    } else if (p.kind == ProbeKind::kAtLimit ||
               p.kind == ProbeKind::kPastLimit) {
      JudgeLimitProbe(p, c, out);
    }
  }

  std::vector<ControlCase> Controls() const override;
  DetectorCoverage Coverage(int) const override;

 private:
  // A plant the target cut (its count below the auditor's prediction) was
  // processed only in part: a finding (the output scan never counts it).
  void JudgePlant(const Probe& p, const Completion& c, FindingSink& out) {
    const int tolerance = view().calibration->plant_tolerance;
    if (!c.usable || JudgeCount(p.predicted, c.prompt_tokens, tolerance) !=
                         CountFate::kCut) {
      return;
    }
    for (Finding& f :
         JudgeBoundary({p.predicted, 0, 200, c.prompt_tokens, tolerance,
                        tenant_name(p.tenant), "plant"})) {
      out.Add(std::move(f));
    }
  }

  void JudgeLimitProbe(const Probe& p, const Completion& c, FindingSink& out) {
    const Calibration& cal = *view().calibration;
    const bool past = p.kind == ProbeKind::kPastLimit;
    // A 200 without an answer (a stream the server dropped, TGI's chat
    // stream past the limit) is neither a refusal nor an admission:
    // counted and shown, never judged.
    if (c.status == 200 && !c.usable && !c.http_ok_error) {
      ++unanswered_[c.dropped_stream ? "dropped_stream" : "bad_response"];
      return;
    }
    // Judged: a refusal past the limit, a 200 past it (a finding by
    // itself), or an answer at the limit whose count can be compared.
    if ((past && IsRefusal(c.status)) ||
        (c.usable && (past || c.prompt_tokens >= 0))) {
      judged_.Add(p.tenant);
    }
    for (Finding& f : JudgeBoundary({p.predicted, cal.limit.refuse_above,
                                     c.status, c.usable ? c.prompt_tokens : -1,
                                     cal.tolerance, tenant_name(p.tenant),
                                     past ? "past_limit" : "at_limit"})) {
      out.Add(std::move(f));
    }
  }

  int Count(const std::string& outcome) const {
    auto it = unanswered_.find(outcome);
    return it == unanswered_.end() ? 0 : it->second;
  }

  TenantCounts judged_;
  std::map<std::string, int> unanswered_;  // outcome -> 200s not judged
};
KVCANARY_REGISTER_DETECTOR(BoundaryDetector);

// Canned answers read by the real completion parser, then judged: a 200
// past the limit, a silent truncation, and a refusal sent inside a 200
// stream in the two ways servers send one (which must read as a refusal,
// not as a 200).
std::vector<ControlCase> BoundaryDetector::Controls() const {
  if (!prepared()) return {};
  const Calibration& c = *view().calibration;
  if (c.unit_tokens <= 0 || c.limit.refuse_above <= 0) return {};
  const int limit = c.limit.refuse_above;
  const int past = limit + 2 * c.unit_tokens;
  const int tolerance = c.tolerance;
  const std::string tenant = view().tenants[0];
  auto judge = [=](ProbeResponse r, bool stream, int predicted) {
    return [=](FindingSink& out) {
      const Completion got = ParseCompletion(r, stream);
      for (Finding& f : JudgeBoundary({predicted, limit, got.status,
                                       got.usable ? got.prompt_tokens : -1,
                                       tolerance, tenant, "control",
                                       got.usable || got.status != 200})) {
        out.Add(std::move(f));
      }
    };
  };
  auto kinds_are = [](std::vector<std::string> want) {
    return [want](const std::vector<Finding>& got) {
      std::vector<std::string> kinds;
      for (const Finding& f : got) kinds.push_back(f.kind);
      return kinds == want;
    };
  };
  const std::string accepted = absl::StrCat(
      R"({"id":"cmpl-1","choices":[{"text":" ok"}],"usage":{"prompt_tokens":)",
      past, "}}");
  const std::string cut =
      absl::StrCat(R"({"choices":[{"text":" ok"}],"usage":{"prompt_tokens":)",
                   limit / 2, "}}");
  const std::string openai_stream_error =
      "data: {\"error\":{\"message\":\"too long\",\"type\":"
      "\"BadRequestError\",\"code\":400}}\n\ndata: [DONE]\n\n";
  const std::string llama_stream_error =
      "error: {\"code\":400,\"message\":\"the request exceeds the "
      "available context size\",\"type\":\"exceed_context_size_error\"}"
      "\n\n";
  return {
      {"a 200 past the limit", judge(Canned(200, accepted), false, past),
       kinds_are({"boundary_accepted"})},
      {"a prompt cut to half", judge(Canned(200, cut), false, limit),
       kinds_are({"prompt_truncated"})},
      {"a refusal inside a 200 stream",
       judge(Canned(200, openai_stream_error), true, past), kinds_are({})},
      {"llama.cpp's refusal event in a 200 stream",
       judge(Canned(200, llama_stream_error), true, past), kinds_are({})},
      {"TGI's chat stream past the limit: [DONE] alone",
       judge(Canned(200, "data: [DONE]\n\n"), true, past), kinds_are({})},
      {"a stream cut after its headers",
       judge(Canned(200, "data: {\"choices\":[{\"text\":\" ok\"}]}\n\n"), true,
             past),
       kinds_are({})},
  };
}

DetectorCoverage BoundaryDetector::Coverage(int) const {
  DetectorCoverage d;
  if (!prepared()) return d;
  const Calibration& cal = *view().calibration;
  d.coverage = judged_.Named(view().tenants);
  if (!cal.boundary_failure.empty()) d.AddFailure(cal.boundary_failure);
  for (const auto& [outcome, n] : unanswered_) {
    d.notes.push_back(absl::StrCat(n,
                                   " HTTP 200 answers without a usable "
                                   "answer (",
                                   outcome, "): not judged"));
  }
  d.notes.push_back(absl::StrCat("limit ", cal.limit.prompt_tokens,
                                 " prompt tokens (", cal.limit.source, ": ",
                                 cal.limit.where, ")"));
  d.stats = {{"limit_prompt_tokens", cal.limit.prompt_tokens},
             {"refuse_above_tokens", cal.limit.refuse_above},
             {"limit_source", cal.limit.source},
             {"unit_tokens", cal.unit_tokens},
             {"dropped_streams", Count("dropped_stream")},
             {"bad_responses", Count("bad_response")},
             {"tolerance", cal.tolerance},
             {"at_limit_tokens",
              cal.base_tokens + cal.at_limit_units * cal.unit_tokens},
             {"past_limit_tokens",
              cal.past_limit_units == 0
                  ? 0
                  : cal.base_tokens + cal.past_limit_units * cal.unit_tokens}};
  return d;
}

}  // namespace
}  // namespace kvcanary::auditor
