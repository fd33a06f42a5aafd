// The scorecard of kvcanary-bench-detect: a Markdown table for people,
// printed a row at a time as each configuration and mode's campaigns end
// (the matrix takes minutes), and the rows and totals kept for the summary
// line and the JSON document (--json).
#ifndef KVCANARY_BENCH_DETECT_SCORECARD_H_
#define KVCANARY_BENCH_DETECT_SCORECARD_H_

#include <string>

#include "bench/detect_matrix.h"
#include "common/text_table.h"
#include "nlohmann/json.hpp"

namespace kvcanary::bench {

// Not thread-safe; owned by the bench's main thread.
class Scorecard {
 public:
  Scorecard();

  // The table's header, flushed.
  void PrintHeader() const;
  // Prints `row` (from Summarise) and keeps it; on a healthy configuration
  // its campaigns with any finding are counted as false alarms.
  void Add(const Config& c, const std::string& mode, nlohmann::json row);
  // The healthy campaigns with any finding, of how many, and the time.
  void PrintTotals(double elapsed_s) const;
  // The document --json writes: the machine, the run's settings, the
  // totals and every row.
  nlohmann::json Document(int duration_s, int seeds, double elapsed_s) const;

  int false_alarms() const { return false_alarms_; }
  int errors() const { return errors_; }

 private:
  TextTable table_;
  nlohmann::json rows_ = nlohmann::json::array();
  int false_alarms_ = 0, healthy_campaigns_ = 0, errors_ = 0;
};

}  // namespace kvcanary::bench

#endif  // KVCANARY_BENCH_DETECT_SCORECARD_H_
