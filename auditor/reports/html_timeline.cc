// The HTML report's timeline (html_timeline.h): an inline SVG of probes and
// errors per bucket (lines) above findings per bucket (bars).
#include "auditor/reports/html_timeline.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "auditor/reports/report_util.h"

namespace kvcanary::auditor {
namespace {

using nlohmann::json;
using report_internal::Arr;
using report_internal::Get;
using report_internal::Int;
using report_internal::Num;

// The smallest 1, 2 or 5 times a power of ten that is >= v (1 for v <= 0).
double NiceCeil(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10, std::floor(std::log10(v)));
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    if (v <= m * p * (1 + 1e-9)) return m * p;
  }
  return 10 * p;
}

// The timeline chart: probes and errors per bucket (lines) in the top
// panel, findings per bucket (bars) in the bottom one, one time axis.
struct Chart {
  static constexpr double kLeft = 70, kRight = 1110, kBottom = 262;
  struct Panel {
    double top, bottom, max;
    const char* title;
  };
  std::vector<double> probes, errors, findings;  // per drawn bucket
  double bucket_s = 1;                           // of a drawn bucket
  Panel lines{34, 170, 1, "probes, errors"}, bars{206, kBottom, 1, "findings"};
  double X(size_t i) const {
    return kLeft + (i + 0.5) * (kRight - kLeft) / probes.size();
  }
};

// At most 550 drawn buckets: neighbouring buckets are summed.
Chart ReadChart(const json& t, size_t n) {
  const size_t group = (n + 549) / 550, m = (n + group - 1) / group;
  Chart c;
  c.bucket_s = Num(Get(t, "bucket_s"), 1) * group;
  for (auto [series, key] :
       {std::pair{&c.probes, "probes"}, std::pair{&c.errors, "errors"},
        std::pair{&c.findings, "findings"}}) {
    series->assign(m, 0);
    const json& a = Arr(t, key);
    for (size_t i = 0; i < a.size(); ++i) {
      (*series)[i / group] += static_cast<double>(Int(a[i]));
    }
  }
  const auto max = [](const std::vector<double>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  c.lines.max = NiceCeil(std::max(max(c.probes), max(c.errors)));
  c.bars.max = NiceCeil(max(c.findings));
  return c;
}

void AppendLegendAndAxes(const Chart& c, std::string* out) {
  double x = Chart::kLeft;
  for (const auto& [colour, label] :
       {std::pair{"#2563eb", "probes sent"},
        std::pair{"#e07b00", "errors (no usable answer)"},
        std::pair{"#b3261e", "findings (raw rows)"}}) {
    absl::StrAppend(
        out,
        absl::StrFormat("<rect x=\"%.0f\" y=\"8\" width=\"12\" height=\"12\" "
                        "fill=\"%s\"/><text x=\"%.0f\" y=\"19\">%s</text>",
                        x, colour, x + 17, label));
    x += 60 + 8 * std::string_view(label).size();
  }
  for (const Chart::Panel& p : {c.lines, c.bars}) {
    for (const double f : {0.0, 0.5, 1.0}) {
      const double y = p.bottom - f * (p.bottom - p.top);
      absl::StrAppend(
          out,
          absl::StrFormat(
              "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" "
              "stroke=\"%s\"/><text x=\"%.0f\" y=\"%.1f\" "
              "text-anchor=\"end\">%g</text>",
              Chart::kLeft, Chart::kRight, y, y, f == 0 ? "#5b6373" : "#e2e5ea",
              Chart::kLeft - 6, y + 4, f * p.max));
    }
    absl::StrAppend(
        out, absl::StrFormat("<text transform=\"translate(16 %.0f) "
                             "rotate(-90)\" text-anchor=\"middle\">%s</text>",
                             (p.top + p.bottom) / 2, p.title));
  }
  // Time ticks, in seconds since the start.
  const double total_s = c.probes.size() * c.bucket_s;
  const double tick_s = NiceCeil(total_s / 8);
  for (double s = 0; s <= total_s + 1e-9; s += tick_s) {
    const double x =
        Chart::kLeft + s / total_s * (Chart::kRight - Chart::kLeft);
    absl::StrAppend(
        out,
        absl::StrFormat("<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" "
                        "stroke=\"#5b6373\"/><text x=\"%.1f\" y=\"%.0f\" "
                        "text-anchor=\"middle\">%g</text>",
                        x, x, Chart::kBottom, Chart::kBottom + 5, x,
                        Chart::kBottom + 18, s));
  }
  absl::StrAppend(
      out, absl::StrFormat("<text x=\"%.0f\" y=\"300\" text-anchor=\"middle\">"
                           "seconds since start (one bucket = %g s)</text>",
                           (Chart::kLeft + Chart::kRight) / 2, c.bucket_s));
}

void AppendSeries(const Chart& c, std::string* out) {
  const Chart::Panel& p = c.lines;
  for (const auto& [series, colour] :
       {std::pair{&c.probes, "#2563eb"}, std::pair{&c.errors, "#e07b00"}}) {
    absl::StrAppend(out, "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"",
                    colour, "\" points=\"");
    for (size_t i = 0; i < series->size(); ++i) {
      const double y = p.bottom - (*series)[i] / p.max * (p.bottom - p.top);
      absl::StrAppend(out, absl::StrFormat("%.1f,%.1f ", c.X(i), y));
    }
    absl::StrAppend(out, "\"/>");
  }
  const double width =
      std::max(1.0, 0.8 * (Chart::kRight - Chart::kLeft) / c.findings.size());
  for (size_t i = 0; i < c.findings.size(); ++i) {
    if (c.findings[i] <= 0) continue;
    const double h = c.findings[i] / c.bars.max * (c.bars.bottom - c.bars.top);
    absl::StrAppend(
        out, absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                             "height=\"%.1f\" fill=\"#b3261e\"/>",
                             c.X(i) - width / 2, c.bars.bottom - h, width, h));
  }
}

}  // namespace

void AppendHtmlTimeline(const json& r, std::string* out) {
  const json& t = Get(r, "timeline");
  if (!t.is_object()) return;
  absl::StrAppend(out, "<section><h2>Timeline</h2>");
  const size_t n = std::max({Arr(t, "probes").size(), Arr(t, "errors").size(),
                             Arr(t, "findings").size()});
  if (n == 0) {
    absl::StrAppend(out, "<p>No timeline recorded.</p></section>\n");
    return;
  }
  const Chart chart = ReadChart(t, n);
  absl::StrAppend(out,
                  "<svg width=\"1120\" height=\"306\" viewBox=\"0 0 1120 306\" "
                  "role=\"img\" aria-label=\"timeline\">");
  AppendLegendAndAxes(chart, out);
  AppendSeries(chart, out);
  absl::StrAppend(out, "</svg></section>\n");
}

}  // namespace kvcanary::auditor
