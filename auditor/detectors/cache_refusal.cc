#include "auditor/detectors/cache_refusal.h"

#include <map>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "auditor/detectors/registry.h"
#include "auditor/target/prompts.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/stats.h"
#include "common/status_macros.h"

namespace kvcanary::auditor {

std::optional<Finding> JudgeRefusals(const RefusalRounds& r, double alpha) {
  const double p =
      FisherExactGreater(r.cross_failed, r.cross, r.control_failed, r.control);
  if (r.cross_failed == 0 || p > alpha) return std::nullopt;
  Finding f;
  f.detector = "cache_refusal";
  f.kind = "cross_tenant_cache_refusal";
  f.severity = Severity::kHigh;
  f.writer = absl::StrJoin(r.writers, ",");
  f.reader = absl::StrJoin(r.readers, ",");
  f.detail = {{"cross_failed", r.cross_failed},
              {"cross_probes", r.cross},
              {"control_failed", r.control_failed},
              {"control_probes", r.control},
              {"p_value", p},
              {"alpha", alpha}};
  return f;
}

namespace {

// Letters after a unique head: several cache blocks on any engine (16
// tokens each on vLLM and ours), well inside any limit.
constexpr int kPrefixLetters = 48;

class CacheRefusalDetector : public DetectorOf<CacheRefusalDetector> {
 public:
  static DetectorSpec Spec() {
    DetectorSpec s;
    s.name = "cache_refusal";
    s.summary =
        "a tenant's request refused only when another tenant has just sent "
        "its prefix: a prefix cache shared across tenants, seen through its "
        "refusals (as cache-audit sees it)";
    s.unit = "cross-tenant prefix probes judged";
    s.order = 75;
    s.default_floor = 5;
    s.finish_sends = true;  // its rounds
    return s;
  }

  // After the load: per tenant as reader (the next one writing), floor + 1
  // rounds of a cross and a control probe, in random order.
  absl::Status Finish(CampaignIo& io, FindingSink& out) override {
    ran_ = true;
    const std::vector<AuditTenant>& t = *io.tenants;
    const int tenants = static_cast<int>(t.size());
    const int rounds = tenants * (floor_ + 1);
    for (int i = 0; i < rounds; ++i) {
      const int reader = i % tenants, writer = (i + 1) % tenants;
      bool arms[2] = {true, false};  // cross first?
      if (RandomU64() & 1) std::swap(arms[0], arms[1]);
      for (const bool cross : arms) {
        RETURN_IF_ERROR(Round(io, writer, reader, cross));
      }
    }
    auto f = JudgeRefusals(counts_, kRefusalAlpha);
    if (f.has_value()) out.Add(*std::move(f));
    return absl::OkStatus();
  }

  // Cross probes all refused against controls all answered (a finding),
  // and as many refused on both sides (none).
  std::vector<ControlCase> Controls() const override {
    auto judge = [](int cross_failed, int control_failed) {
      return [=](FindingSink& out) {
        RefusalRounds r;
        r.cross = r.control = 12;
        r.cross_failed = cross_failed;
        r.control_failed = control_failed;
        r.writers = {"control-writer"};
        r.readers = {"control-reader"};
        auto f = JudgeRefusals(r, kRefusalAlpha);
        if (f.has_value()) out.Add(*std::move(f));
      };
    };
    return {{"every cross-tenant probe refused, every control answered",
             judge(12, 0),
             [](const std::vector<Finding>& got) {
               return got.size() == 1 &&
                      got[0].kind == "cross_tenant_cache_refusal";
             }},
            {"as many refused on both sides", judge(4, 4),
             [](const std::vector<Finding>& got) { return got.empty(); }}};
  }

  absl::Status Start(const DetectorSettings& s, CampaignIo& io) override {
    floor_ = Floor(s);
    return Detector::Start(s, io);
  }

  DetectorCoverage Coverage(int) const override {
    DetectorCoverage d;
    if (!prepared()) return d;
    d.coverage = judged_.Named(view().tenants);
    if (!ran_) d.AddFailure("its rounds did not run");
    d.notes.push_back(absl::StrFormat(
        "cross-tenant probes refused %d of %d, controls %d of %d (a finding "
        "at p <= %g, Fisher exact)",
        counts_.cross_failed, counts_.cross, counts_.control_failed,
        counts_.control, kRefusalAlpha));
    d.stats = {{"cross_probes", counts_.cross},
               {"cross_failed", counts_.cross_failed},
               {"control_probes", counts_.control},
               {"control_failed", counts_.control_failed},
               {"primes_failed", primes_failed_},
               {"alpha", kRefusalAlpha}};
    return d;
  }

 private:
  std::string Prefix() {
    return CacheProbePrefix(&buster_, kPrefixLetters, RandomU64);
  }

  // One request, recorded as a probe row.
  Completion Send(CampaignIo& io, const char* kind, int who,
                  const std::string& prompt) {
    const AuditTenant& tenant = (*io.tenants)[who];
    const Completion c = io.target->SendAlone(tenant, prompt, 1, true);
    const std::string outcome = Outcome(c);
    io.metrics->CountProbe(kind, outcome);
    if (io.log != nullptr) {
      (void)io.log->Record("probe", {{"kind", kind},
                                     {"tenant", tenant.name},
                                     {"outcome", outcome},
                                     {"http_status", c.status},
                                     {"prompt_sha256", Sha256Hex(prompt)},
                                     {"engine_request", c.engine_request}});
    }
    if (c.engine_request != 0)
      io.engine_requests[c.engine_request] = tenant.name;
    return c;
  }

  absl::Status Round(CampaignIo& io, int writer, int reader, bool cross) {
    const std::string prime = Prefix();
    const Completion p = Send(io, "refusal_prime", writer, prime);
    RETURN_IF_ERROR(io.target->down());
    if (!p.usable) {  // the writer's failure, not the reader's
      ++primes_failed_;
      return absl::OkStatus();
    }
    const std::string suffix = absl::StrFormat(
        " Reply %04u.", static_cast<unsigned>(RandomU64() % 10000));
    const Completion c = Send(io, cross ? "refusal_cross" : "refusal_control",
                              reader, (cross ? prime : Prefix()) + suffix);
    RETURN_IF_ERROR(io.target->down());
    if (c.status == 401 || c.status == 403) return absl::OkStatus();
    const bool failed = !c.usable;
    if (cross) {
      ++counts_.cross;
      judged_.Add(reader);
      if (failed) {
        ++counts_.cross_failed;
        counts_.writers.insert((*io.tenants)[writer].name);
        counts_.readers.insert((*io.tenants)[reader].name);
      }
    } else {
      ++counts_.control;
      counts_.control_failed += failed;
    }
    return absl::OkStatus();
  }

  int floor_ = kDefaultFloor;  // from Start
  bool ran_ = false;
  CacheBuster buster_;
  RefusalRounds counts_;
  int primes_failed_ = 0;
  TenantCounts judged_;
};
KVCANARY_REGISTER_DETECTOR(CacheRefusalDetector);

}  // namespace
}  // namespace kvcanary::auditor
