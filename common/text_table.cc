#include "common/text_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"

namespace kvcanary {
namespace {

// `text` padded with spaces to `width` display columns on the side
// `align` leaves open.
std::string Pad(absl::string_view text, size_t width, TextTable::Align align) {
  const size_t w = DisplayWidth(text);
  const std::string fill(width > w ? width - w : 0, ' ');
  return align == TextTable::kLeft ? absl::StrCat(text, fill)
                                   : absl::StrCat(fill, text);
}

}  // namespace

size_t DisplayWidth(absl::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;  // not a continuation
  return n;
}

TextTable::Options TextTable::Plain(size_t gap, std::string indent, bool rule) {
  Options o;
  o.gap = gap;
  o.indent = std::move(indent);
  o.rule = rule;
  return o;
}

TextTable::Options TextTable::Markdown() {
  Options o;
  o.style = Style::kMarkdown;
  return o;
}

TextTable::TextTable(std::vector<Column> columns)
    : TextTable(std::move(columns), Options()) {}

TextTable::TextTable(std::vector<Column> columns, Options options)
    : columns_(std::move(columns)), options_(std::move(options)) {
  CHECK(!columns_.empty());
}

void TextTable::AddRow(std::vector<std::string> cells) {
  CHECK_LE(cells.size(), columns_.size());
  cells.resize(columns_.size());
  lines_.push_back({false, 0, std::move(cells)});
  ++num_rows_;
}

void TextTable::AddNote(size_t column, std::string text) {
  CHECK_LT(column, columns_.size());
  lines_.push_back({true, column, {std::move(text)}});
}

bool TextTable::has_header() const {
  if (options_.style == Style::kMarkdown) return true;
  for (const Column& c : columns_) {
    if (!c.header.empty()) return true;
  }
  return false;
}

std::vector<size_t> TextTable::Widths(bool with_rows) const {
  std::vector<size_t> widths;
  for (const Column& c : columns_) {
    widths.push_back(std::max(c.min_width, DisplayWidth(c.header)));
    // A Markdown rule needs three dashes (two and a colon).
    if (options_.style == Style::kMarkdown) {
      widths.back() = std::max<size_t>(widths.back(), 3);
    }
  }
  if (!with_rows) return widths;
  for (const Line& line : lines_) {
    if (line.note) continue;
    for (size_t i = 0; i < line.cells.size(); ++i) {
      widths[i] = std::max(widths[i], DisplayWidth(line.cells[i]));
    }
  }
  return widths;
}

std::string TextTable::Render(const std::vector<std::string>& cells,
                              const std::vector<size_t>& widths) const {
  CHECK_LE(cells.size(), columns_.size());
  const auto cell = [&](size_t i) -> absl::string_view {
    return i < cells.size() ? absl::string_view(cells[i]) : "";
  };
  std::string out;
  if (options_.style == Style::kMarkdown) {
    for (size_t i = 0; i < columns_.size(); ++i) {
      absl::StrAppend(&out, "| ", Pad(cell(i), widths[i], columns_[i].align),
                      " ");
    }
    absl::StrAppend(&out, "|\n");
    return out;
  }
  out = options_.indent;
  const std::string gap(options_.gap, ' ');
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (i > 0) out += gap;
    const bool last = i + 1 == columns_.size();
    if (last && columns_[i].align == kLeft) {
      out.append(cell(i).data(), cell(i).size());
    } else {
      out += Pad(cell(i), widths[i], columns_[i].align);
    }
  }
  // An empty last cell leaves the gap before it.
  out.erase(out.find_last_not_of(' ') + 1);
  absl::StrAppend(&out, "\n");
  return out;
}

std::string TextTable::Rule(const std::vector<size_t>& widths) const {
  std::string out;
  if (options_.style == Style::kMarkdown) {
    for (size_t i = 0; i < columns_.size(); ++i) {
      const bool right = columns_[i].align == kRight;
      absl::StrAppend(&out, "|", std::string(widths[i] + (right ? 1 : 2), '-'),
                      right ? ":" : "");
    }
    return absl::StrCat(out, "|\n");
  }
  size_t total = 0;
  for (size_t w : widths) total += w;
  total += options_.gap * (widths.size() - 1);
  return absl::StrCat(options_.indent, std::string(total, '-'), "\n");
}

std::string TextTable::Note(const Line& note,
                            const std::vector<size_t>& widths) const {
  size_t offset = 0;
  for (size_t i = 0; i < note.note_column; ++i) {
    offset += widths[i] + options_.gap;
  }
  return absl::StrCat(options_.indent, std::string(offset, ' '), note.cells[0],
                      "\n");
}

std::string TextTable::Header(const std::vector<size_t>& widths) const {
  if (!has_header()) return "";
  std::vector<std::string> headers;
  for (const Column& c : columns_) headers.push_back(c.header);
  std::string out = Render(headers, widths);
  if (options_.style == Style::kMarkdown || options_.rule) {
    out += Rule(widths);
  }
  return out;
}

std::string TextTable::ToString() const {
  const std::vector<size_t> widths = Widths(/*with_rows=*/true);
  std::string out = Header(widths);
  for (const Line& line : lines_) {
    out += line.note ? Note(line, widths) : Render(line.cells, widths);
  }
  return out;
}

std::string TextTable::HeaderText() const {
  return Header(Widths(/*with_rows=*/false));
}

std::string TextTable::RowText(const std::vector<std::string>& cells) const {
  return Render(cells, Widths(/*with_rows=*/false));
}

}  // namespace kvcanary
