//===- Canvas.cpp - RGB raster: filled rects, anti-aliased polylines, PNG output ===//
//
// Lines are drawn by coverage: a pixel's share of the line is estimated from the distance of its
// centre to the segment (full inside half the width, fading to nothing over one pixel). That
// gives even, smooth lines at any slope and width without supersampling the whole canvas.
//
//===----------------------------------------------------------------------------===//
#include "runtime/plot/Canvas.h"

#include "kernels/Tensor.h"

#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace cpc::plot {

Canvas::Canvas(int width, int height, Rgb background) : width_(width), height_(height) {
  if (width <= 0 || height <= 0)
    throw RuntimeError("canvas size " + std::to_string(width) + "x" + std::to_string(height) + " is empty");
  rgb_.resize(size_t(width) * height * 3);
  for (size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = background.r;
    rgb_[i + 1] = background.g;
    rgb_[i + 2] = background.b;
  }
  resetClip();
}

Rgb Canvas::pixel(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_)
    return {};
  const uint8_t *p = &rgb_[(size_t(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::setClip(Rect clip) {
  int left = std::max(clip.x, 0), top = std::max(clip.y, 0);
  int right = std::min(clip.right(), width_), bottom = std::min(clip.bottom(), height_);
  clip_ = {left, top, std::max(right - left, 0), std::max(bottom - top, 0)};
}

void Canvas::blendPixel(int x, int y, Rgb colour, double alpha) {
  if (!clip_.contains(x, y) || alpha <= 0)
    return;
  alpha = std::min(alpha, 1.0);
  uint8_t *p = &rgb_[(size_t(y) * width_ + x) * 3];
  auto mix = [alpha](uint8_t under, uint8_t over) { return uint8_t(std::lround(under + (over - under) * alpha)); };
  p[0] = mix(p[0], colour.r);
  p[1] = mix(p[1], colour.g);
  p[2] = mix(p[2], colour.b);
}

void Canvas::fillRect(Rect rect, Rgb colour) {
  int left = std::max(rect.x, clip_.x), right = std::min(rect.right(), clip_.right());
  int top = std::max(rect.y, clip_.y), bottom = std::min(rect.bottom(), clip_.bottom());
  for (int y = top; y < bottom; ++y)
    for (int x = left; x < right; ++x) {
      uint8_t *p = &rgb_[(size_t(y) * width_ + x) * 3];
      p[0] = colour.r;
      p[1] = colour.g;
      p[2] = colour.b;
    }
}

namespace {

// The distance from `p` to the segment a-b (to the point a when the segment has no length).
double distanceToSegment(Point p, Point a, Point b) {
  double dx = b.x - a.x, dy = b.y - a.y;
  double lengthSquared = dx * dx + dy * dy;
  double t = lengthSquared > 0 ? ((p.x - a.x) * dx + (p.y - a.y) * dy) / lengthSquared : 0;
  t = std::clamp(t, 0.0, 1.0);
  return std::hypot(p.x - (a.x + t * dx), p.y - (a.y + t * dy));
}

// Raises `coverage` (one float per pixel of `clip`) to the segment a-b's coverage of each pixel.
void coverSegment(std::vector<float> &coverage, const Rect &clip, Point a, Point b, double halfWidth) {
  double reach = halfWidth + 1;
  int left = std::max(clip.x, (int)std::floor(std::min(a.x, b.x) - reach));
  int right = std::min(clip.right() - 1, (int)std::ceil(std::max(a.x, b.x) + reach));
  int top = std::max(clip.y, (int)std::floor(std::min(a.y, b.y) - reach));
  int bottom = std::min(clip.bottom() - 1, (int)std::ceil(std::max(a.y, b.y) + reach));
  for (int y = top; y <= bottom; ++y)
    for (int x = left; x <= right; ++x) {
      double share = std::clamp(halfWidth + 0.5 - distanceToSegment({double(x), double(y)}, a, b), 0.0, 1.0);
      float &cell = coverage[size_t(y - clip.y) * clip.width + (x - clip.x)];
      cell = std::max(cell, float(share));
    }
}

bool isFinite(Point p) { return std::isfinite(p.x) && std::isfinite(p.y); }

} // namespace

void Canvas::drawPolyline(const std::vector<Point> &points, Rgb colour, double width) {
  if (points.empty() || clip_.width == 0 || clip_.height == 0)
    return;
  for (Point p : points)
    if (!isFinite(p)) // a caller's bug; drawing it would loop over the whole clip or nothing
      throw RuntimeError("drawPolyline: a point is not finite");
  std::vector<float> coverage(size_t(clip_.width) * clip_.height, 0.f);
  double halfWidth = std::max(width, 1.0) / 2;
  if (points.size() == 1)
    coverSegment(coverage, clip_, points[0], points[0], halfWidth);
  for (size_t i = 1; i < points.size(); ++i)
    coverSegment(coverage, clip_, points[i - 1], points[i], halfWidth);
  for (int y = 0; y < clip_.height; ++y)
    for (int x = 0; x < clip_.width; ++x)
      if (float share = coverage[size_t(y) * clip_.width + x]; share > 0)
        blendPixel(clip_.x + x, clip_.y + y, colour, share);
}

void writePng(const Canvas &canvas, const std::string &path) {
  FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    throw RuntimeError(path + ": cannot write: " + std::strerror(errno));
  // libpng's simplified API reports failure by its return value (no longjmp to guard against).
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = png_uint_32(canvas.width());
  image.height = png_uint_32(canvas.height());
  image.format = PNG_FORMAT_RGB;
  bool written = png_image_write_to_stdio(&image, file, 0, canvas.rgb().data(), 0, nullptr) != 0;
  std::string message = written ? "" : image.message;
  png_image_free(&image);
  int error = std::fflush(file) == 0 ? 0 : errno; // a full disk shows at the flush or the close
  if (std::fclose(file) != 0 && error == 0)
    error = errno;
  if (!written || error != 0) {
    std::remove(path.c_str()); // no half-written image left behind to be mistaken for a plot
    throw RuntimeError(path + ": cannot write: " + (!written ? message : std::strerror(error)));
  }
}

} // namespace cpc::plot
