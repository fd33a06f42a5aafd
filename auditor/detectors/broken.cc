#include "auditor/detectors/broken.h"

#include <utility>
#include <vector>

namespace kvcanary::auditor {
namespace {

class DroppingSink : public FindingSink {
 public:
  void Add(Finding) override {}
};

class BrokenDetector : public Detector {
 public:
  explicit BrokenDetector(std::unique_ptr<Detector> real)
      : real_(std::move(real)) {}

  const DetectorSpec& spec() const override { return real_->spec(); }
  absl::Status Start(const DetectorSettings& s, CampaignIo& io) override {
    return real_->Start(s, io);
  }
  void Prepare(const CampaignView& view) override { real_->Prepare(view); }
  std::vector<ControlCase> Controls() const override {
    std::vector<ControlCase> cases = real_->Controls();
    for (ControlCase& c : cases) {
      c.run = [run = std::move(c.run)](FindingSink&) {
        DroppingSink dropped;
        run(dropped);
      };
    }
    return cases;
  }
  void Judge(const Probe& p, const Completion& c,
             const std::vector<Finding>& earlier, FindingSink&) override {
    DroppingSink dropped;
    real_->Judge(p, c, earlier, dropped);
  }
  absl::Status Finish(CampaignIo& io, FindingSink&) override {
    DroppingSink dropped;
    return real_->Finish(io, dropped);
  }
  void Stop() override { real_->Stop(); }
  int Floor(const DetectorSettings& settings) const override {
    return real_->Floor(settings);
  }
  DetectorCoverage Coverage(int floor) const override {
    return real_->Coverage(floor);
  }
  void Report(CampaignResult* r) const override { real_->Report(r); }

 private:
  const std::unique_ptr<Detector> real_;
};

}  // namespace

std::unique_ptr<Detector> BreakDetector(std::unique_ptr<Detector> real) {
  return std::make_unique<BrokenDetector>(std::move(real));
}

}  // namespace kvcanary::auditor
