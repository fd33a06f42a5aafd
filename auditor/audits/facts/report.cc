#include "auditor/audits/facts/report.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kvcanary::auditor {

using json = nlohmann::json;

namespace {

// An answer that says only "nothing here".
bool Absent(int status) {
  return status == 404 || status == 405 || status == 501;
}

// A trace stream that refused the subscription answered; one that could
// not be reached did not.
bool TraceAnswered(const FactsTrace& t) {
  return t.start.ok() ||
         t.start.code() == absl::StatusCode::kFailedPrecondition;
}

// Why a read does not count (ReadCounts).
constexpr char kNotCounted[] =
    "only 200, 401, 403, 404, 405 and 501 count as an answer";

constexpr char kOneTenant[] =
    "one tenant: reads by another tenant's key unproven";

size_t ExposureFindings(const std::vector<Finding>& findings) {
  return std::count_if(findings.begin(), findings.end(), [](const Finding& f) {
    return f.detector == "exposure";
  });
}

std::string ReadText(const EndpointRead& r) {
  if (!r.answered()) return absl::StrCat(r.spec.reader, " no answer");
  return absl::StrCat(
      r.spec.reader, " ", r.status,
      r.status == 200 ? absl::StrCat(" ", r.body.size(), " B") : "");
}

// The readers of `reads`, no key first, in the order they appear.
std::vector<std::string> Readers(const std::vector<EndpointRead>& reads) {
  std::vector<std::string> out;
  for (const EndpointRead& r : reads) {
    if (r.spec.node) continue;
    if (std::find(out.begin(), out.end(), r.spec.reader) == out.end()) {
      out.push_back(r.spec.reader);
    }
  }
  return out;
}

// The reads of each endpoint, in catalogue order: the target's, then each
// node's.
std::vector<std::pair<std::string, std::vector<const EndpointRead*>>>
ByEndpoint(const FactsRun& run) {
  std::vector<std::pair<std::string, std::vector<const EndpointRead*>>> out;
  std::map<std::string, size_t> at;
  for (const auto* reads : {&run.before, &run.after}) {
    for (const EndpointRead& r : *reads) {
      const std::string name = EndpointName(r.spec);
      auto [it, fresh] = at.try_emplace(name, out.size());
      if (fresh) out.push_back({name, {}});
      out[it->second].second.push_back(&r);
    }
  }
  return out;
}

Check EndpointCheck(const std::string& name,
                    const std::vector<const EndpointRead*>& reads) {
  Check c{"endpoint", name, "passed", ""};
  std::vector<std::string> before, after;
  bool all_absent = true, unanswered = false;
  for (const EndpointRead* r : reads) {
    (r->after_plant ? after : before).push_back(ReadText(*r));
    unanswered = unanswered || !ReadCounts(*r);
    all_absent = all_absent && r->answered() && Absent(r->status);
  }
  c.message = absl::StrCat("before the plant: ", absl::StrJoin(before, ", "));
  if (!after.empty()) {
    absl::StrAppend(&c.message, "; after: ", absl::StrJoin(after, ", "));
  }
  if (unanswered) {
    c.state = "error";
    absl::StrAppend(&c.message, " (", kNotCounted, ")");
  } else if (all_absent) {
    c.state = "skipped";
  }
  return c;
}

std::string TraceName(const FactsTrace& t) {
  return absl::StrCat("GET ", t.url, "/v1/trace");
}

Check TraceEndpointCheck(const FactsTrace& t) {
  Check c{"endpoint", TraceName(t), "passed", ""};
  if (t.start.ok()) {
    c.message = absl::StrCat("followed without a key: ", t.events, " events, ",
                             t.requests_seen, " requests");
  } else {
    c.state = TraceAnswered(t) ? "passed" : "error";
    c.message = std::string(t.start.message());
  }
  return c;
}

// The exposure check of one reader of the target (and, for no key, of the
// nodes' GET endpoints).
Check ReaderCheck(const FactsRun& run, const std::string& reader,
                  const std::vector<Finding>& findings) {
  Check c{"exposure", reader, "passed", ""};
  std::vector<std::string> found;
  for (const Finding& f : findings) {
    if (f.detector != "exposure" || f.reader != reader) continue;
    const std::string where = f.group.value("node", "");
    if (absl::EndsWith(where, "/v1/trace")) {
      continue;  // the node trace checks' own
    }
    found.push_back(absl::StrCat(where, " (", f.kind, ")"));
  }
  int read = 0, unanswered = 0;
  for (const EndpointRead& r : run.after) {
    if (r.spec.reader != reader) continue;
    ++read;
    unanswered += !ReadCounts(r);
  }
  if (!found.empty()) {
    c.state = "failed";
    c.message = absl::StrCat(run.plant.writer, "'s marker or request found in ",
                             absl::StrJoin(found, ", "));
  } else if (!run.planted) {
    c.state = "error";
    c.message = absl::StrCat(run.no_plant, ": unproven");
  } else if (unanswered > 0) {
    c.state = "error";
    c.message =
        absl::StrCat(unanswered, " of ", read,
                     " reads after the plant read nothing (", kNotCounted, ")");
  } else {
    c.message = absl::StrCat(read, " endpoints read after ", run.plant.writer,
                             "'s plant: not found");
  }
  return c;
}

Check CompletionCheck(const BehaviourProbe& b) {
  const Completion& c = b.completion;
  Check out{"completion",
            b.reader == kNoKeyReader ? absl::StrCat(b.kind, ", ", kNoKeyReader)
                                     : b.kind,
            "passed", ""};
  if (c.status == 0) {
    out.state = "error";
    out.message =
        absl::StrCat(b.reader, ": no HTTP answer (", c.error.message(), ")");
    return out;
  }
  out.message = absl::StrCat(b.reader, ": HTTP ", c.status, ", ", Outcome(c));
  return out;
}

// With one tenant nobody reads with another tenant's key: unproven, unless
// something was found anyway.
Check OneTenantCheck(const std::vector<Finding>& findings) {
  if (ExposureFindings(findings) > 0) {
    return {"exposure", "another tenant's key", "skipped",
            "one tenant: no other tenant's key to read with"};
  }
  return {"exposure", "another tenant's key", "error", kOneTenant};
}

Check TraceExposureCheck(const FactsRun& run, const FactsTrace& t) {
  Check c{"exposure", absl::StrCat(kNoKeyReader, " ", TraceName(t)), "passed",
          ""};
  if (t.plant_seen) {
    c.state = "failed";
    c.message =
        absl::StrCat(run.plant.writer, "'s request ", run.plant.engine_request,
                     " (and its tenant and timings) read without a key");
  } else if (!t.start.ok()) {
    c.state = TraceAnswered(t) ? "passed" : "error";
    c.message = std::string(t.start.message());
  } else if (!t.end.ok()) {
    c.state = "error";
    c.message = absl::StrCat("the stream broke: ", t.end.message());
  } else if (run.plant.engine_request == 0) {
    c.state = "error";
    c.message = absl::StrCat(
        "not attributable: the plant's answer named no engine request; ",
        t.requests_seen, " requests seen without a key");
  } else {
    c.message = absl::StrCat("the plant's request ", run.plant.engine_request,
                             " not seen (", t.requests_seen, " requests seen)");
  }
  return c;
}

}  // namespace

bool ReadCounts(const EndpointRead& read) {
  return read.status == 200 || read.status == 401 || read.status == 403 ||
         Absent(read.status);
}

std::vector<Check> FactsChecks(const FactsRun& run,
                               const std::vector<Finding>& findings) {
  std::vector<Check> checks;
  for (const auto& [name, reads] : ByEndpoint(run)) {
    checks.push_back(EndpointCheck(name, reads));
  }
  for (const FactsTrace& t : run.traces) {
    checks.push_back(TraceEndpointCheck(t));
  }
  for (const BehaviourProbe& b : run.behaviour) {
    checks.push_back(CompletionCheck(b));
  }
  if (run.plant.probe < 0) {
    // Required checks that did not run: errors, so a JUnit gate fails.
    const std::string why =
        absl::StrCat("required, did not run: ", run.no_plant);
    checks.push_back({"plant", "-", "error", why});
    checks.push_back({"exposure", kNoKeyReader, "error", why});
    for (const FactsTrace& t : run.traces) {
      checks.push_back({"exposure",
                        absl::StrCat(kNoKeyReader, " ", TraceName(t)), "error",
                        why});
    }
    return checks;
  }
  checks.push_back({"plant", run.plant.writer, run.planted ? "passed" : "error",
                    run.planted
                        ? absl::StrCat("HTTP 200, marker ", run.plant.marker.id)
                        : run.no_plant});
  for (const std::string& reader : Readers(run.after)) {
    checks.push_back(ReaderCheck(run, reader, findings));
  }
  if (run.tenants.size() == 1) checks.push_back(OneTenantCheck(findings));
  for (const FactsTrace& t : run.traces) {
    checks.push_back(TraceExposureCheck(run, t));
  }
  return checks;
}

namespace {

// The facts detector: every target endpoint read, for each reader.
DetectorCoverage FactsCoverage(const FactsRun& run) {
  const int endpoints = static_cast<int>(FactsTargetPaths().size());
  DetectorCoverage facts;
  facts.name = kFactsDetectorNames[0];
  facts.floor = endpoints;
  facts.unit = "target endpoints read";
  for (const EndpointRead& r : run.before) {
    if (r.spec.node) {
      if (!ReadCounts(r)) {
        facts.AddFailure(absl::StrCat(
            EndpointName(r.spec), ": ",
            r.answered() ? absl::StrCat("HTTP ", r.status)
                         : absl::StrCat("no HTTP answer (", r.error, ")")));
      }
      continue;
    }
    facts.coverage[r.spec.reader] += ReadCounts(r) ? 1 : 0;
  }
  for (const FactsTrace& t : run.traces) {
    if (!TraceAnswered(t)) facts.AddFailure(std::string(t.start.message()));
  }
  for (const BehaviourProbe& b : run.behaviour) {
    if (b.completion.status == 0) {
      facts.AddFailure(absl::StrCat(b.request, " (", b.kind,
                                    "): no HTTP answer (",
                                    b.completion.error.message(), ")"));
    }
  }
  const int fields = static_cast<int>(std::size(kFactFields));
  facts.stats = {{"fields", fields},
                 {"fields_revealed", run.table.revealed()},
                 {"behaviour_completions", run.behaviour.size()}};
  facts.notes.push_back(
      absl::StrCat(run.table.revealed(), " of ", fields, " fields revealed"));
  facts.Judge(Readers(run.before));
  return facts;
}

// The exposure detector: every target endpoint read again after the plant.
DetectorCoverage ExposureCoverage(const FactsRun& run,
                                  const std::vector<Finding>& findings) {
  const int endpoints = static_cast<int>(FactsTargetPaths().size());
  DetectorCoverage exposure;
  exposure.name = kFactsDetectorNames[1];
  exposure.floor = endpoints;
  exposure.unit = "target endpoints read after the plant";
  std::vector<std::string> readers = Readers(run.after);
  if (run.plant.probe < 0) {
    // Required, so "disabled" judges inconclusive, naming why.
    exposure.disabled =
        absl::StrCat(run.no_plant, ", so the exposure check did not run");
    readers = {kNoKeyReader};
  } else {
    if (!run.planted) exposure.AddFailure(run.no_plant);
    if (run.tenants.size() == 1 && ExposureFindings(findings) == 0) {
      exposure.AddFailure(kOneTenant);
    }
  }
  for (const EndpointRead& r : run.after) {
    if (r.spec.node) {
      if (!ReadCounts(r)) {
        exposure.AddFailure(absl::StrCat(
            EndpointName(r.spec), ": ",
            r.answered() ? absl::StrCat("HTTP ", r.status) : "no HTTP answer",
            " after the plant"));
      }
      continue;
    }
    exposure.coverage[r.spec.reader] += ReadCounts(r) ? 1 : 0;
  }
  for (const FactsTrace& t : run.traces) {
    if (run.plant.probe < 0 || !t.start.ok()) continue;
    if (!t.end.ok()) {
      exposure.AddFailure(absl::StrCat(TraceName(t), ": ", t.end.message()));
    } else if (run.plant.engine_request == 0 && !t.plant_seen) {
      exposure.AddFailure(absl::StrCat(
          TraceName(t), ": not attributable (the plant named no request)"));
    }
  }
  exposure.findings = static_cast<int>(ExposureFindings(findings));
  exposure.stats = {{"readers_checked", static_cast<int>(readers.size())},
                    {"planted", run.planted},
                    {"marker", run.plant.marker.id},
                    {"trace_nodes", run.traces.size()}};
  exposure.notes = run.hints;
  exposure.Judge(readers);
  return exposure;
}

}  // namespace

std::vector<DetectorCoverage> FactsDetectors(
    const FactsRun& run, const std::vector<Finding>& findings) {
  return {FactsCoverage(run), ExposureCoverage(run, findings)};
}

json FactsDetails(const FactsRun& run, const std::vector<Finding>& findings) {
  json d = json::object();
  for (const char* field : kFactFields) d[field] = run.table.Value(field);
  d["fields_revealed"] =
      absl::StrCat(run.table.revealed(), " of ", std::size(kFactFields));
  d["sources"] = run.table.Sources();
  std::map<std::string, std::set<std::string>> headers;
  json endpoints = json::array();
  for (const auto& [name, reads] : ByEndpoint(run)) {
    json rs = json::array();
    for (const EndpointRead* r : reads) {
      json e = {{"reader", r->spec.reader},
                {"after_plant", r->after_plant},
                {"http_status", r->status}};
      if (r->answered()) {
        e["bytes"] = r->body.size();
        e["body_sha256"] = r->sha256;
      } else {
        e["error"] = r->error;
      }
      rs.push_back(std::move(e));
      for (const auto& [h, v] : RevealingHeaders(r->headers)) {
        if (headers[h].size() < 4) headers[h].insert(v);
      }
    }
    endpoints.push_back({{"endpoint", name}, {"reads", rs}});
  }
  d["endpoints"] = endpoints;
  json completions = json::array();
  for (const BehaviourProbe& b : run.behaviour) {
    const Completion& c = b.completion;
    completions.push_back({{"probe", b.probe},
                           {"kind", b.kind},
                           {"reader", b.reader},
                           {"http_status", c.status},
                           {"outcome", Outcome(c)},
                           {"sse", AnsweredAsStream(b.response)},
                           {"prompt_tokens", c.prompt_tokens},
                           {"cached_tokens", c.cached_tokens},
                           {"engine_request_header", c.engine_request != 0}});
    for (const auto& [h, v] : RevealingHeaders(b.response.headers)) {
      if (headers[h].size() < 4) headers[h].insert(v);
    }
  }
  d["completions"] = completions;
  d["headers"] = headers;
  json found = json::array();
  for (const Finding& f : findings) {
    if (f.detector != "exposure") continue;
    found.push_back({{"endpoint", f.group.value("node", "")},
                     {"reader", f.reader},
                     {"kind", f.kind},
                     {"found", f.detail.value("found", "")}});
  }
  json traces = json::array();
  for (const FactsTrace& t : run.traces) {
    traces.push_back(
        {{"url", t.url},
         {"followed", t.start.ok()},
         {"events", t.events},
         {"requests_seen", t.requests_seen},
         {"plant_seen", t.plant_seen},
         {"error", t.start.ok() ? std::string(t.end.message())
                                : std::string(t.start.message())}});
  }
  d["exposure"] = {{"planted", run.planted},
                   {"writer", run.plant.writer},
                   {"marker", run.plant.marker.id},
                   {"plant_status", run.plant.status},
                   {"readers", Readers(run.after)},
                   {"not_run", run.plant.probe < 0 ? run.no_plant : ""},
                   {"found", found},
                   {"traces", traces},
                   {"hints", run.hints}};
  return d;
}

}  // namespace kvcanary::auditor
