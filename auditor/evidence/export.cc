#include "auditor/evidence/export.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "auditor/evidence/bundle_format.h"
#include "auditor/evidence/bundle_html.h"
#include "auditor/evidence/controls.h"
#include "auditor/evidence/controls_default.h"
#include "auditor/evidence/oscal.h"
#include "common/file.h"

namespace kvcanary::auditor {
namespace {

std::string Rfc3339(int64_t us) {
  return absl::FormatTime(absl::RFC3339_full, absl::FromUnixMicros(us),
                          absl::UTCTimeZone());
}

}  // namespace

const char* DefaultControlsJson() { return kDefaultControlsJson; }

absl::StatusOr<std::map<std::string, std::string>> DerivedBundleFiles(
    const BundleEvidence& evidence, const std::string& controls_json) {
  absl::StatusOr<std::vector<Control>> controls = ParseControls(controls_json);
  if (!controls.ok()) return controls.status();
  ExportContext ctx;
  ctx.origin = evidence.origin;
  ctx.since = Rfc3339(evidence.since_us);
  ctx.until = Rfc3339(evidence.until_us);
  ctx.generated = Rfc3339(evidence.exported_us);
  ctx.tree_size = static_cast<int64_t>(evidence.tree_size);
  ctx.root_hash_hex = storage::MerkleHashHex(evidence.root);
  ctx.checkpoint_file = kCheckpointFile;
  std::map<std::string, std::string> files =
      AnswerSheets(evidence.campaigns, *controls, ctx);
  files[kOscalFile] =
      OscalAssessmentResults(evidence.campaigns, *controls, ctx).dump(2) + "\n";
  files[kBundleViewFile] = BundleHtml(evidence.campaigns, *controls, ctx);
  return files;
}

int ExportCommand(ExportOptions o, const std::string& controls_path) {
  std::string controls_json = DefaultControlsJson();
  if (!controls_path.empty()) {
    absl::StatusOr<std::string> text = ReadFile(controls_path);
    if (!text.ok()) {
      std::fprintf(stderr, "kvcanary-auditor: --controls %s\n",
                   std::string(text.status().message()).c_str());
      return 2;
    }
    controls_json = *std::move(text);
  }
  // Checked before anything is read, so a bad map is a clear error.
  if (absl::Status s = ParseControls(controls_json).status(); !s.ok()) {
    std::fprintf(stderr, "kvcanary-auditor: control map: %s\n",
                 std::string(s.message()).c_str());
    return 2;
  }
  o.make_extra_files = [controls_json](const BundleEvidence& evidence) {
    return DerivedBundleFiles(evidence, controls_json);
  };
  return ExportBundle(o);
}

}  // namespace kvcanary::auditor
