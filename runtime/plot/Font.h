//===- Font.h - cpc plot's own 5x7 bitmap font (ASCII 32-126) ------------------===//
//
// Each glyph is 5 columns by 9 rows: rows 0-6 hold capitals and digits (the baseline is under
// row 6), lowercase letters rise to row 2, and rows 7-8 hold descenders (g, j, p, q, y, comma,
// underscore). Glyphs advance 6 columns, lines 11 rows; `scale` draws each bit as a square of
// scale x scale pixels. Bytes outside 32-126 are drawn as '?'.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_PLOT_FONT_H
#define CPC_RUNTIME_PLOT_FONT_H

#include "runtime/plot/Canvas.h"

#include <string_view>

namespace cpc::plot {

constexpr int kGlyphColumns = 5;
constexpr int kGlyphRows = 9;
constexpr int kCapitalRows = 7; // rows above the baseline
constexpr int kGlyphAdvance = 6;
constexpr int kLineAdvance = 11;

/// Whether the glyph of `c` has its bit at (column, row) set; false outside the glyph.
bool glyphBit(char c, int column, int row);

/// The width in pixels `text` takes at `scale` (no trailing gap).
int textWidth(std::string_view text, int scale);

/// Draws `text` with its top-left corner (the top of the capitals) at (x, y); returns the width.
int drawText(Canvas &canvas, int x, int y, std::string_view text, Rgb colour, int scale);

} // namespace cpc::plot

#endif
