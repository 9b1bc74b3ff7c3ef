//===- Canvas.h - an RGB raster with clipped, anti-aliased drawing -------------===//
//
// The drawing surface of `cpc plot`. Coordinates are pixel-centred: the pixel at column x, row y
// is the unit square around the point (x, y), so a 1 px line along y = 20.0 covers row 20
// exactly. Every drawing call is clipped to the clip rectangle (the whole canvas unless set).
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_PLOT_CANVAS_H
#define CPC_RUNTIME_PLOT_CANVAS_H

#include <cstdint>
#include <string>
#include <vector>

namespace cpc::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb &o) const { return r == o.r && g == o.g && b == o.b; }
  bool operator!=(const Rgb &o) const { return !(*this == o); }
};

struct Rect {
  int x = 0, y = 0, width = 0, height = 0;
  int right() const { return x + width; }   // one past the last column
  int bottom() const { return y + height; } // one past the last row
  bool contains(int px, int py) const { return px >= x && px < right() && py >= y && py < bottom(); }
};

struct Point {
  double x = 0, y = 0;
};

class Canvas {
public:
  Canvas(int width, int height, Rgb background);

  int width() const { return width_; }
  int height() const { return height_; }
  Rgb pixel(int x, int y) const;
  /// Rows top to bottom, pixels interleaved R, G, B (what PNG_FORMAT_RGB expects).
  const std::vector<uint8_t> &rgb() const { return rgb_; }

  /// Later drawing touches only `clip` (intersected with the canvas).
  void setClip(Rect clip);
  void resetClip() { setClip({0, 0, width_, height_}); }

  /// Mixes `colour` into a pixel with weight `alpha` in [0, 1]; outside the clip it does nothing.
  void blendPixel(int x, int y, Rgb colour, double alpha);
  void fillRect(Rect rect, Rgb colour);
  /// A line `width` px wide through `points`, one segment after the other, anti-aliased. Joints
  /// are drawn once (each pixel takes its largest coverage over the segments, not their sum), so
  /// a curve of many short segments is as even as a straight line. One point draws a dot.
  void drawPolyline(const std::vector<Point> &points, Rgb colour, double width);
  void drawLine(Point from, Point to, Rgb colour, double width) { drawPolyline({from, to}, colour, width); }

private:
  int width_, height_;
  Rect clip_;
  std::vector<uint8_t> rgb_;
};

/// Writes the canvas as an 8-bit RGB PNG; cpc::RuntimeError naming `path` when it cannot.
void writePng(const Canvas &canvas, const std::string &path);

} // namespace cpc::plot

#endif
