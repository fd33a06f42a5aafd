// Tables for people: a command's detector and incident tables, `findings
// --rows`, the demo's requests, a benchmark's figures. Each column is as
// wide as its widest cell (or its minimum), measured in display columns so
// the few non-ASCII characters the project prints ('×', '≥', '—') keep the
// columns aligned. Two styles: plain (cells separated by spaces, like `ps`
// or `kubectl get`) and Markdown (pipes and a rule under the header, for
// figures pasted into docs/). Output for machines is JSON, never this.
//
//   TextTable t({{"DETECTOR"}, {"STATE"}, {"FLOOR", TextTable::kRight}});
//   t.AddRow({"golden", "ok", "3"});
//   std::string text = t.ToString();
//
// Not thread-safe; a table is built and printed by one thread.
#ifndef KVCANARY_COMMON_TEXT_TABLE_H_
#define KVCANARY_COMMON_TEXT_TABLE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvcanary {

// Display columns of UTF-8 text: one per code point. The project prints no
// double-width or combining characters; invalid bytes count one each.
size_t DisplayWidth(absl::string_view text);

class TextTable {
 public:
  enum Align { kLeft, kRight };
  struct Column {
    std::string header;  // "" in every column: no header line (plain style)
    Align align = kLeft;
    size_t min_width = 0;  // display columns
  };
  enum class Style {
    // Cells `gap` spaces apart; no trailing spaces (a last left-aligned
    // column is not padded); an optional rule of dashes under the header.
    kPlain,
    // "| a | b |", the header over "|---|--:|" (right-aligned columns end
    // in ':'), every cell padded so the source reads as a table too.
    kMarkdown,
  };
  struct Options {
    Style style = Style::kPlain;
    size_t gap = 2;      // kPlain: spaces between columns
    std::string indent;  // kPlain: before every line
    bool rule = false;   // kPlain: a line of dashes under the header
  };
  // Plain style, `gap` spaces apart, `indent` before every line, a rule
  // under the header if `rule`.
  static Options Plain(size_t gap, std::string indent = "", bool rule = false);
  static Options Markdown();

  // Plain style, default options. (Two constructors, not a default
  // argument: clang cannot use Options' member initializers inside the
  // class that declares it.)
  explicit TextTable(std::vector<Column> columns);
  TextTable(std::vector<Column> columns, Options options);

  // A row; fewer cells than columns leaves the rest empty. CHECK-fails on
  // more cells than columns.
  void AddRow(std::vector<std::string> cells);
  // A line of its own under the last row, starting where column `column`
  // starts (plain style): a note about that row, which widens no column.
  // REQUIRES: column < the number of columns.
  void AddNote(size_t column, std::string text);

  size_t num_rows() const { return num_rows_; }

  // The whole table, every line ending in '\n'.
  std::string ToString() const;

  // For a table printed row by row as its figures are measured, where
  // later rows are not known yet: the header (and rule), and one row, each
  // padded to the columns' min_width only (a longer cell shifts its own
  // line). Rows added with AddRow are not printed by these.
  std::string HeaderText() const;
  std::string RowText(const std::vector<std::string>& cells) const;

 private:
  struct Line {
    bool note = false;
    size_t note_column = 0;
    std::vector<std::string> cells;  // a note: its text alone
  };
  bool has_header() const;
  std::vector<size_t> Widths(bool with_rows) const;
  std::string Render(const std::vector<std::string>& cells,
                     const std::vector<size_t>& widths) const;
  std::string Rule(const std::vector<size_t>& widths) const;
  std::string Note(const Line& note, const std::vector<size_t>& widths) const;
  std::string Header(const std::vector<size_t>& widths) const;

  std::vector<Column> columns_;
  Options options_;
  std::vector<Line> lines_;
  size_t num_rows_ = 0;
};

}  // namespace kvcanary

#endif  // KVCANARY_COMMON_TEXT_TABLE_H_
