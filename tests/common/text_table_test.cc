// The text-table printer: columns as wide as their widest cell in display
// columns, alignment, notes that widen nothing, Markdown, and rows printed
// one at a time.
#include "common/text_table.h"

#include "gtest/gtest.h"

namespace kvcanary {
namespace {

TEST(TextTableTest, PlainColumnsAreAsWideAsTheirWidestCell) {
  TextTable t({{"NAME"}, {"ROWS", TextTable::kRight}, {"WHERE"}});
  t.AddRow({"golden", "3", "node a"});
  t.AddRow({"kv_events", "1200", "-"});
  EXPECT_EQ(t.ToString(),
            "NAME       ROWS  WHERE\n"
            "golden        3  node a\n"
            "kv_events  1200  -\n");
  EXPECT_EQ(t.num_rows(), 2u);
}

TEST(TextTableTest, NoTrailingSpacesAndMissingCellsAreEmpty) {
  TextTable t({{"A"}, {"B"}, {"C"}});
  t.AddRow({"x"});
  t.AddRow({"long", "", "z"});
  EXPECT_EQ(t.ToString(),
            "A     B  C\n"
            "x\n"
            "long     z\n");
}

TEST(TextTableTest, MinimumWidthGapIndentAndRule) {
  TextTable t({{"SEQ", TextTable::kLeft, 6}, {"KIND"}},
              TextTable::Plain(1, "  ", /*rule=*/true));
  t.AddRow({"12", "golden_mismatch"});
  EXPECT_EQ(t.ToString(),
            "  SEQ    KIND\n"
            "  ----------------------\n"
            "  12     golden_mismatch\n");
}

TEST(TextTableTest, NonAsciiCharactersCountOneColumnEach) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("4×"), 2u);
  EXPECT_EQ(DisplayWidth("≥ 3 — ok"), 8u);
  TextTable t({{"FIGURE"}, {"VALUE", TextTable::kRight}});
  t.AddRow({"speed-up", "3.1×"});
  t.AddRow({"target", "≥ 3×"});
  t.AddRow({"note", "—"});
  EXPECT_EQ(t.ToString(),
            "FIGURE    VALUE\n"
            "speed-up   3.1×\n"
            "target     ≥ 3×\n"
            "note          —\n");
}

TEST(TextTableTest, NotesStartAtTheirColumnAndWidenNothing) {
  TextTable t({{"DETECTOR"}, {"STATE"}, {"COVERAGE"}}, TextTable::Plain(1));
  t.AddRow({"golden", "inconclusive", "2/3"});
  t.AddNote(1, "a note far longer than any column of the table above it");
  t.AddRow({"echo", "ok", "5/5"});
  EXPECT_EQ(t.ToString(),
            "DETECTOR STATE        COVERAGE\n"
            "golden   inconclusive 2/3\n"
            "         a note far longer than any column of the table above "
            "it\n"
            "echo     ok           5/5\n");
}

TEST(TextTableTest, WithoutHeadersThereIsNoHeaderLine) {
  TextTable t({{""}, {""}});
  t.AddRow({"leak_prefix", "serve another tenant's prefix"});
  t.AddRow({"stale_page", "skip the scrub"});
  EXPECT_EQ(t.ToString(),
            "leak_prefix  serve another tenant's prefix\n"
            "stale_page   skip the scrub\n");
}

TEST(TextTableTest, MarkdownPadsEveryCellAndMarksRightAlignment) {
  TextTable t({{"figure"}, {"value", TextTable::kRight}},
              TextTable::Markdown());
  t.AddRow({"framed", "812 MB/s"});
  t.AddRow({"x", "1"});
  EXPECT_EQ(t.ToString(),
            "| figure |    value |\n"
            "|--------|---------:|\n"
            "| framed | 812 MB/s |\n"
            "| x      |        1 |\n");
}

TEST(TextTableTest, RowsPrintedAsMeasuredUseTheMinimumWidths) {
  TextTable t(
      {{"clients", TextTable::kLeft, 8}, {"req/s", TextTable::kRight, 10}},
      TextTable::Markdown());
  t.AddRow({"ignored by RowText and HeaderText"});
  EXPECT_EQ(t.HeaderText(),
            "| clients  |      req/s |\n"
            "|----------|-----------:|\n");
  EXPECT_EQ(t.RowText({"4", "12.5"}), "| 4        |       12.5 |\n");
  // A longer cell shifts only its own line.
  EXPECT_EQ(t.RowText({"123456789", "1"}), "| 123456789 |          1 |\n");
}

TEST(TextTableTest, TooManyCellsIsAProgrammingError) {
  TextTable t({{"A"}});
  EXPECT_DEATH(t.AddRow({"1", "2"}), "");
}

}  // namespace
}  // namespace kvcanary
