#include "auditor/evidence/oscal.h"

#include <openssl/evp.h>

#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "auditor/reports/report_util.h"
#include "auditor/result/finding.h"
#include "common/clock.h"

namespace kvcanary::auditor {
namespace {

using json = nlohmann::json;

// Properties of our own are in this namespace (OSCAL names without `ns`
// are NIST's).
constexpr const char* kNs = "urn:kvcanary:oscal";
// kvcanary's UUID v5 namespace (a random v4 UUID, fixed forever).
constexpr uint8_t kNamespace[16] = {0x6f, 0x1c, 0x7a, 0x52, 0x1d, 0x0e,
                                    0x4b, 0x4e, 0x9a, 0x7c, 0x3b, 0x8e,
                                    0x5d, 0x2f, 0x0a, 0x11};

std::string Str(const json& j, const char* key, const char* alt = nullptr) {
  return RecordString(j, key, alt);
}
using report_internal::Arr;

// An RFC 3339 time in the form OSCAL's pattern takes (UTC, "Z"), or
// `fallback` when `s` does not parse.
std::string OscalTime(const std::string& s, const std::string& fallback) {
  absl::Time t;
  std::string err;
  if (!s.empty() && absl::ParseTime(absl::RFC3339_full, s, &t, &err)) {
    return Rfc3339Utc(absl::ToUnixMicros(t));
  }
  return fallback;
}

// OSCAL strings with a pattern may not be empty nor start or end with
// whitespace.
std::string Clean(absl::string_view s) {
  return std::string(absl::StripAsciiWhitespace(s));
}

void AddProp(json* props, const char* name, absl::string_view value) {
  std::string v = Clean(value);
  if (!v.empty()) props->push_back({{"name", name}, {"ns", kNs}, {"value", v}});
}

// Sets `key` to `props` when there is any (OSCAL arrays need an item).
void SetIfAny(json* obj, const char* key, json arr) {
  if (!arr.empty()) (*obj)[key] = std::move(arr);
}

std::vector<std::string> Unique(const std::vector<json>& campaigns,
                                const char* key, const char* inner) {
  std::set<std::string> seen;
  for (const json& k : campaigns) {
    if (inner == nullptr) {
      if (!Str(k, key).empty()) seen.insert(Str(k, key));
      continue;
    }
    for (const json& v : Arr(k, key)) {
      if (v.is_string()) seen.insert(v.get<std::string>());
      if (v.is_object() && !Str(v, inner).empty()) seen.insert(Str(v, inner));
    }
  }
  return {seen.begin(), seen.end()};
}

json PlanResource(const std::vector<json>& campaigns, const OscalContext& ctx,
                  const std::string& uuid) {
  json plan = {{"origin", ctx.origin},
               {"window", {{"since", ctx.since}, {"until", ctx.until}}},
               {"targets", Unique(campaigns, "target", nullptr)},
               {"tenants", Unique(campaigns, "tenants", "")},
               {"commands", Unique(campaigns, "command", nullptr)},
               {"detectors", Unique(campaigns, "detectors", "name")},
               {"campaigns", json::array()}};
  for (const json& k : campaigns) {
    plan["campaigns"].push_back({{"campaign", Str(k, "campaign")},
                                 {"command", Str(k, "command")},
                                 {"target", Str(k, "target")},
                                 {"started", Str(k, "started", "started_at")},
                                 {"ended", Str(k, "ended", "ended_at")},
                                 {"file", Str(k, "file")}});
  }
  const std::string desc = absl::StrCat(
      "kvcanary campaign plan for ", ctx.origin, ": ", campaigns.size(),
      " campaign(s) from ", ctx.since, " to ", ctx.until, "; targets ",
      absl::StrJoin(plan["targets"].get<std::vector<std::string>>(), ", "),
      "; tenants ",
      absl::StrJoin(plan["tenants"].get<std::vector<std::string>>(), ", "),
      "; commands ",
      absl::StrJoin(plan["commands"].get<std::vector<std::string>>(), ", "),
      "; detectors ",
      absl::StrJoin(plan["detectors"].get<std::vector<std::string>>(), ", "),
      ".");
  return {{"uuid", uuid},
          {"title", "kvcanary campaign plan"},
          {"description", desc},
          {"base64",
           {{"filename", "campaign-plan.json"},
            {"media-type", "application/json"},
            {"value", absl::Base64Escape(plan.dump(2))}}}};
}

json FileResource(const std::string& uuid, const std::string& title,
                  const std::string& href, json props) {
  json r = {{"uuid", uuid}, {"title", title}};
  SetIfAny(&r, "props", std::move(props));
  if (!href.empty()) {
    r["rlinks"] =
        json::array({{{"href", href}, {"media-type", "application/json"}}});
  }
  return r;
}

std::string DetectorText(const json& d) {
  std::vector<std::string> cov;
  const json& c = d.value("coverage", json::object());
  if (c.is_object()) {
    for (auto it = c.begin(); it != c.end(); ++it) {
      cov.push_back(absl::StrCat(it.key(), " ", it->dump()));
    }
  }
  return absl::StrCat(
      "detector ", Str(d, "name"), " ", Str(d, "state"),
      d.value("required", true) ? "" : " (optional)", "; coverage ",
      cov.empty() ? "none" : absl::StrJoin(cov, ", "), " (floor ",
      d.value("floor", json(0)).dump(), " per tenant); ",
      d.value("findings", json(0)).dump(), " finding rows");
}

// Everything the document needs, built in order: back-matter resources
// first (observations refer to them), then observations, risks, findings.
class Builder {
 public:
  Builder(const std::vector<json>& campaigns,
          const std::vector<Control>& controls, const OscalContext& ctx)
      : campaigns_(campaigns), controls_(controls), ctx_(ctx) {
    generated_ = OscalTime(ctx.generated, OscalTime(ctx.until, kEpoch));
    since_ = OscalTime(ctx.since, generated_);
    until_ = OscalTime(ctx.until, generated_);
    doc_id_ = absl::StrCat(ctx.origin, "|", ctx.since, "|", ctx.until, "|",
                           ctx.tree_size, "|", ctx.root_hash_hex);
  }

  json Build() {
    const std::string plan_uuid = Id("plan");
    resources_.push_back(PlanResource(campaigns_, ctx_, plan_uuid));
    json cp_props = json::array();
    AddProp(&cp_props, "tree-size", absl::StrCat(ctx_.tree_size));
    AddProp(&cp_props, "root-hash", ctx_.root_hash_hex);
    AddProp(&cp_props, "origin", ctx_.origin);
    resources_.push_back(FileResource(Id("checkpoint"), "signed checkpoint",
                                      ctx_.checkpoint_file,
                                      std::move(cp_props)));
    for (size_t i = 0; i < campaigns_.size(); ++i) AddCampaign(i);
    for (const Control& c : controls_) {
      if (!c.id.empty()) AddControlFinding(c);
    }
    json result = {{"uuid", Id("result")},
                   {"title", absl::StrCat("kvcanary tenant-isolation tests, ",
                                          ctx_.since, " to ", ctx_.until)},
                   {"description",
                    absl::StrCat(campaigns_.size(), " campaign(s) against ",
                                 Unique(campaigns_, "target", nullptr).size(),
                                 " target(s); evidence log ", ctx_.origin,
                                 " at tree size ", ctx_.tree_size, ".")},
                   {"start", since_},
                   {"end", until_},
                   {"reviewed-controls", ReviewedControls()}};
    SetIfAny(&result, "observations", observations_);
    SetIfAny(&result, "risks", risks_);
    SetIfAny(&result, "findings", findings_);
    json metadata = {
        {"title", absl::StrCat("kvcanary assessment results: ", ctx_.origin)},
        {"last-modified", generated_},
        {"version", absl::StrCat("tree-size-", ctx_.tree_size)},
        {"oscal-version", "1.1.2"}};
    json props = json::array();
    AddProp(&props, "root-hash", ctx_.root_hash_hex);
    SetIfAny(&metadata, "props", std::move(props));
    return {{"assessment-results",
             {{"uuid", Id("document")},
              {"metadata", std::move(metadata)},
              {"import-ap",
               {{"href", "#" + plan_uuid},
                {"remarks",
                 "The assessment plan is the campaign plan in this "
                 "document's back-matter."}}},
              {"results", json::array({std::move(result)})},
              {"back-matter", {{"resources", resources_}}}}}};
  }

 private:
  static constexpr const char* kEpoch = "1970-01-01T00:00:00.000Z";

  std::string Id(absl::string_view what) {
    return Uuid5(absl::StrCat(doc_id_, "|", what));
  }

  json ReviewedControls() const {
    json ids = json::array();
    for (const Control& c : controls_) {
      if (!c.id.empty()) ids.push_back({{"control-id", c.oscal_id}});
    }
    json sel = {{"description",
                 "Controls of the kvcanary control map "
                 "(docs/controls.md)."}};
    if (ids.empty()) {
      sel["include-all"] = json::object();
    } else {
      sel["include-controls"] = std::move(ids);
    }
    return {{"control-selections", json::array({std::move(sel)})}};
  }

  json Observation(const json& k, const std::string& uuid,
                   const std::string& resource, const std::string& detector,
                   const std::string& text) {
    const std::string file = Str(k, "file");
    json props = json::array();
    AddProp(&props, "campaign", Str(k, "campaign"));
    AddProp(&props, "command", Str(k, "command"));
    AddProp(&props, "detector", detector);
    AddProp(&props, "verdict", Str(k, "verdict"));
    json obs = {
        {"uuid", uuid},
        {"title", absl::StrCat(Str(k, "campaign"), " ", detector)},
        {"description",
         absl::StrCat(Str(k, "command"), " campaign ", Str(k, "campaign"),
                      " on ", Str(k, "target"), " (verdict ", Str(k, "verdict"),
                      "): ", text, ".")},
        {"methods", json::array({"TEST"})},
        {"subjects",
         json::array({{{"subject-uuid", resource},
                       {"type", "resource"},
                       {"title", file.empty() ? "campaign" : file}}})},
        {"collected",
         OscalTime(Str(k, "ended", "ended_at"),
                   OscalTime(Str(k, "started", "started_at"), until_))}};
    SetIfAny(&obs, "props", std::move(props));
    json ev = {{"description", "Campaign result with coverage and incidents"}};
    if (!file.empty()) ev["href"] = file;
    std::vector<std::string> rows;
    for (const json& s : Arr(k, "cited_rows")) rows.push_back(s.dump());
    if (!rows.empty()) {
      ev["description"] =
          absl::StrCat("Campaign result; evidence rows ",
                       absl::StrJoin(rows, " "), " with inclusion proofs");
    }
    obs["relevant-evidence"] = json::array({std::move(ev)});
    return obs;
  }

  void AddCampaign(size_t i) {
    const json& k = campaigns_[i];
    const std::string campaign = Str(k, "campaign");
    const std::string resource = Id(absl::StrCat("file|", i, "|", campaign));
    json props = json::array();
    AddProp(&props, "campaign", campaign);
    AddProp(&props, "verdict", Str(k, "verdict"));
    resources_.push_back(FileResource(resource,
                                      absl::StrCat("campaign ", campaign),
                                      Str(k, "file"), std::move(props)));
    std::map<std::string, std::string>& by_detector = obs_of_[i];
    for (const json& d : Arr(k, "detectors")) {
      const std::string name = Str(d, "name");
      const std::string uuid = Id(absl::StrCat("obs|", i, "|", name));
      by_detector[name] = uuid;
      observations_.push_back(
          Observation(k, uuid, resource, name, DetectorText(d)));
    }
    if (by_detector.empty()) {  // an error verdict may carry no detector
      const std::string uuid = Id(absl::StrCat("obs|", i, "|"));
      by_detector[""] = uuid;
      std::vector<std::string> reasons;
      for (const json& r : Arr(k, "reasons")) {
        if (r.is_string()) reasons.push_back(r.get<std::string>());
      }
      observations_.push_back(Observation(
          k, uuid, resource, "campaign",
          reasons.empty() ? "no detector ran" : absl::StrJoin(reasons, "; ")));
    }
    for (const json& inc : Arr(k, "incidents")) AddIncident(i, inc);
  }

  json RelatedObservations(size_t i, const std::string& detector) {
    json rel = json::array();
    auto it = obs_of_[i].find(detector);
    if (it != obs_of_[i].end()) {
      rel.push_back({{"observation-uuid", it->second}});
      return rel;
    }
    for (const auto& [name, uuid] : obs_of_[i]) {
      rel.push_back({{"observation-uuid", uuid}});
    }
    return rel;
  }

  void AddIncident(size_t i, const json& inc) {
    const json& k = campaigns_[i];
    const std::string id = Str(inc, "id");
    const std::string detector = Str(inc, "detector");
    const std::string command = Str(k, "command");
    std::vector<const Control*> mapped;
    for (const Control& c : controls_) {
      if (!c.id.empty() && ControlCovers(c, command, detector)) {
        mapped.push_back(&c);
      }
    }
    const bool open = IsOpenIncident(inc);
    const std::string summary =
        Str(inc, "summary").empty()
            ? absl::StrCat(Str(inc, "kind"), " (", detector, ")")
            : Str(inc, "summary");
    json finding = {
        {"uuid", Id(absl::StrCat("finding|", i, "|", id))},
        {"title", absl::StrCat("Incident ", id, ": ", Str(inc, "kind"), " (",
                               Str(inc, "severity"), ")")},
        {"description",
         absl::StrCat(summary, ". Campaign ", Str(k, "campaign"), ", detector ",
                      detector, ", ", inc.value("rows", json(0)).dump(),
                      " evidence rows; ", open ? "open" : "closed", ".")},
        {"target",
         {{"type", "objective-id"},
          {"target-id", mapped.empty() ? std::string("kvcanary-isolation")
                                       : mapped[0]->oscal_id},
          {"status", {{"state", "not-satisfied"}, {"reason", "fail"}}}}},
        {"related-observations", RelatedObservations(i, detector)}};
    json props = json::array();
    AddProp(&props, "incident", id);
    AddProp(&props, "campaign", Str(k, "campaign"));
    AddProp(&props, "severity", Str(inc, "severity"));
    for (const Control* c : mapped) AddProp(&props, "control", c->oscal_id);
    SetIfAny(&finding, "props", std::move(props));
    if (open && Str(inc, "severity") == "critical") {
      const std::string risk = Id(absl::StrCat("risk|", i, "|", id));
      risks_.push_back(
          {{"uuid", risk},
           {"title", absl::StrCat("Cross-tenant exposure: incident ", id)},
           {"description", summary},
           {"statement",
            absl::StrCat("An open critical incident: tenant data crossed a "
                         "tenant boundary (",
                         Str(inc, "kind"),
                         "). Until it is fixed and a clean "
                         "campaign shows it, the control "
                         "does not hold.")},
           {"status", "open"},
           {"related-observations", RelatedObservations(i, detector)}});
      finding["related-risks"] = json::array({{{"risk-uuid", risk}}});
    }
    findings_.push_back(std::move(finding));
  }

  void AddControlFinding(const Control& c) {
    const ControlAssessment a = AssessControl(c, campaigns_);
    json rel = json::array();
    for (size_t i : a.campaigns) {
      for (const auto& [name, uuid] : obs_of_[i]) {
        if (name.empty() ||
            ControlCovers(c, Str(campaigns_[i], "command"), name)) {
          rel.push_back({{"observation-uuid", uuid}});
        }
      }
    }
    json finding = {
        {"uuid", Id(absl::StrCat("control|", c.oscal_id))},
        {"title",
         absl::StrCat(c.framework, " ", c.id, ": ", AnswerText(a.answer))},
        {"description", a.why},
        {"target",
         {{"type", "objective-id"},
          {"target-id", c.oscal_id},
          {"status",
           {{"state",
             a.answer == Answer::kYesTested ? "satisfied" : "not-satisfied"},
            {"reason", a.answer == Answer::kYesTested        ? "pass"
                       : a.answer == Answer::kNoFindingsOpen ? "fail"
                                                             : "other"}}}}}};
    SetIfAny(&finding, "related-observations", std::move(rel));
    json props = json::array();
    AddProp(&props, "answer", AnswerText(a.answer));
    SetIfAny(&finding, "props", std::move(props));
    findings_.push_back(std::move(finding));
  }

  const std::vector<json>& campaigns_;
  const std::vector<Control>& controls_;
  const OscalContext& ctx_;
  std::string generated_, since_, until_, doc_id_;
  json resources_ = json::array();
  json observations_ = json::array();
  json risks_ = json::array();
  json findings_ = json::array();
  std::map<size_t, std::map<std::string, std::string>> obs_of_;
};

}  // namespace

std::string Uuid5(absl::string_view name) {
  std::string input(reinterpret_cast<const char*>(kNamespace),
                    sizeof(kNamespace));
  input.append(name.data(), name.size());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(input.data(), input.size(), md, &len, EVP_sha1(), nullptr);
  md[6] = static_cast<unsigned char>((md[6] & 0x0f) | 0x50);
  md[8] = static_cast<unsigned char>((md[8] & 0x3f) | 0x80);
  std::string hex;
  for (int b = 0; b < 16; ++b) {
    if (b == 4 || b == 6 || b == 8 || b == 10) hex.push_back('-');
    absl::StrAppendFormat(&hex, "%02x", md[b]);
  }
  return hex;
}

json OscalAssessmentResults(const std::vector<json>& campaigns,
                            const std::vector<Control>& controls,
                            const OscalContext& ctx) {
  return Builder(campaigns, controls, ctx).Build();
}

}  // namespace kvcanary::auditor
