//===- Augment.cpp - RandomResizedCrop (torchvision) + Pillow's bicubic resample -===//
#include "runtime/data/Augment.h"

#include "kernels/Tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace cpc::data {
namespace {

/// Rows of 8-bit RGB pixels `stride` bytes apart (a whole image or a crop of one).
struct View {
  const uint8_t *data;
  int width, height;
  size_t stride;
};

View viewOf(const RgbImage &image) { return {image.rgb.data(), image.width, image.height, size_t(image.width) * 3}; }

// Pillow's bicubic_filter (a = -0.5), support 2.
double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0)
    x = -x;
  if (x < 1.0)
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0)
    return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Pillow's fixed point: 32 bits less 8 for the value and 2 for overshoot.
constexpr int kPrecisionBits = 32 - 8 - 2;

/// One pass's filter: for output pixel i, taps on input [bounds[2i], bounds[2i] + bounds[2i+1]).
struct Coeffs {
  int ksize = 0;
  std::vector<int> bounds;
  std::vector<int32_t> k;
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc, step for step (the same double
// arithmetic, the same truncations), so the integer taps are identical.
Coeffs precomputeCoeffs(int inSize, float in0, float in1, int outSize) {
  double scale = (double)(in1 - in0) / outSize; // in1 - in0 in float, as Pillow's box is float[4]
  double filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 2.0 * filterscale;
  Coeffs c;
  c.ksize = (int)std::ceil(support) * 2 + 1;
  c.bounds.resize(size_t(outSize) * 2);
  c.k.assign(size_t(outSize) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < outSize; ++xx) {
    double center = in0 + (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
    int xmin = std::max((int)(center - support + 0.5), 0);
    int xmax = std::min((int)(center + support + 0.5), inSize) - xmin;
    for (int x = 0; x < xmax; ++x) {
      w[x] = bicubic((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[size_t(xx) * c.ksize + x] =
          v < 0 ? (int)(-0.5 + v * (1 << kPrecisionBits)) : (int)(0.5 + v * (1 << kPrecisionBits));
    }
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = std::max(xmax, 0);
  }
  return c;
}

// Sums stay within int32 as in Pillow: |taps| sum to under 1.5, so 255 * 1.5 * 2^22 < 2^31.
inline uint8_t clip8(int32_t sum) {
  int32_t v = sum >> kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Output row yy reads input row yy + offset.
void resampleHorizontal(const View &in, int offset, const Coeffs &c, RgbImage &out) {
  for (int yy = 0; yy < out.height; ++yy) {
    const uint8_t *row = in.data + size_t(yy + offset) * in.stride;
    uint8_t *dst = out.rgb.data() + size_t(yy) * out.width * 3;
    for (int xx = 0; xx < out.width; ++xx) {
      const int32_t *k = &c.k[size_t(xx) * c.ksize];
      const uint8_t *p = row + size_t(c.bounds[xx * 2]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.bounds[xx * 2 + 1]; ++x, p += 3) {
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      dst[xx * 3] = clip8(s0);
      dst[xx * 3 + 1] = clip8(s1);
      dst[xx * 3 + 2] = clip8(s2);
    }
  }
}

// Accumulates whole rows (the same integer sums as Pillow's per-pixel loop, in cache order).
void resampleVertical(const View &in, const Coeffs &c, RgbImage &out) {
  size_t rowBytes = size_t(out.width) * 3;
  std::vector<int32_t> acc(rowBytes);
  for (int yy = 0; yy < out.height; ++yy) {
    std::fill(acc.begin(), acc.end(), int32_t(1) << (kPrecisionBits - 1));
    const int32_t *k = &c.k[size_t(yy) * c.ksize];
    for (int y = 0; y < c.bounds[yy * 2 + 1]; ++y) {
      const uint8_t *row = in.data + size_t(y + c.bounds[yy * 2]) * in.stride;
      const int32_t tap = k[y];
      for (size_t b = 0; b < rowBytes; ++b)
        acc[b] += row[b] * tap;
    }
    uint8_t *dst = out.rgb.data() + size_t(yy) * rowBytes;
    for (size_t b = 0; b < rowBytes; ++b)
      dst[b] = clip8(acc[b]);
  }
}

RgbImage blank(int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(size_t(width) * height * 3);
  return image;
}

RgbImage copyOf(const View &in) {
  RgbImage copy = blank(in.width, in.height);
  for (int y = 0; y < in.height; ++y)
    std::memcpy(copy.rgb.data() + size_t(y) * in.width * 3, in.data + y * in.stride, size_t(in.width) * 3);
  return copy;
}

// Pillow's ImagingResampleInner. A pass is skipped when its axis keeps size and box (Pillow
// compares the box's far edge with the output size); horizontal-first produces only the rows
// the vertical pass reads. Pillow 13's order test looks at the input image's size, not the box.
RgbImage resizeView(const View &in, const ResizeBox &box, int outWidth, int outHeight, ResampleOrder order) {
  if (outWidth <= 0 || outHeight <= 0 || in.width <= 0 || in.height <= 0)
    throw RuntimeError("resize: empty image or output size " + std::to_string(outWidth) + " x " +
                       std::to_string(outHeight));
  if (box.left < 0 || box.top < 0 || box.right > in.width || box.bottom > in.height ||
      box.right < box.left || box.bottom < box.top)
    throw RuntimeError("resize: box outside the " + std::to_string(in.width) + " x " +
                       std::to_string(in.height) + " image");
  bool needHorizontal = outWidth != in.width || box.left != 0 || box.right != outWidth;
  bool needVertical = outHeight != in.height || box.top != 0 || box.bottom != outHeight;
  int shrinkY = in.height - outHeight, shrinkX = in.width - outWidth;
  bool horizontalFirst = order == ResampleOrder::HorizontalFirst || !(shrinkY > 0 && shrinkY > shrinkX * 2);
  Coeffs vertical = precomputeCoeffs(in.height, box.top, box.bottom, outHeight);
  Coeffs horizontal;
  if (needHorizontal)
    horizontal = precomputeCoeffs(in.width, box.left, box.right, outWidth);
  if (!needHorizontal && !needVertical)
    return copyOf(in);
  RgbImage temp, out;
  View source = in;
  if (horizontalFirst) {
    if (needHorizontal) {
      int firstRow = vertical.bounds[0];
      int lastRow = vertical.bounds[outHeight * 2 - 2] + vertical.bounds[outHeight * 2 - 1];
      for (int i = 0; i < outHeight; ++i)
        vertical.bounds[i * 2] -= firstRow;
      temp = blank(outWidth, lastRow - firstRow);
      resampleHorizontal(in, firstRow, horizontal, temp);
      if (!needVertical)
        return temp;
      source = viewOf(temp);
    }
    out = blank(source.width, outHeight);
    resampleVertical(source, vertical, out);
    return out;
  }
  if (needVertical) {
    temp = blank(in.width, outHeight);
    resampleVertical(in, vertical, temp);
    if (!needHorizontal)
      return temp;
    source = viewOf(temp);
  }
  out = blank(outWidth, outHeight);
  resampleHorizontal(source, 0, horizontal, out);
  return out;
}

} // namespace

CropBox sampleCropBox(int width, int height, const AugmentOptions &options, CounterRng &rng) {
  double area = double(height) * width;
  double logMin = std::log(options.ratioMin), logMax = std::log(options.ratioMax);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double targetArea = area * rng.uniform(options.scaleMin, options.scaleMax);
    double aspect = std::exp(rng.uniform(logMin, logMax));
    // std::nearbyint rounds half to even, as Python's round().
    int w = (int)std::nearbyint(std::sqrt(targetArea * aspect));
    int h = (int)std::nearbyint(std::sqrt(targetArea / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      int top = (int)rng.randint(0, int64_t(height) - h + 1);
      int left = (int)rng.randint(0, int64_t(width) - w + 1);
      return {top, left, h, w};
    }
  }
  double inRatio = double(width) / double(height);
  double lo = std::min(options.ratioMin, options.ratioMax), hi = std::max(options.ratioMin, options.ratioMax);
  int w = width, h = height;
  if (inRatio < lo)
    h = (int)std::nearbyint(w / lo);
  else if (inRatio > hi)
    w = (int)std::nearbyint(h * hi);
  return {(height - h) / 2, (width - w) / 2, h, w};
}

AugmentDraw drawAugment(int width, int height, const AugmentOptions &options, uint64_t seed,
                        int64_t epoch, int64_t index) {
  CounterRng rng(seed, uint64_t(epoch), uint64_t(index), RngStream::Augment);
  AugmentDraw draw;
  draw.crop = sampleCropBox(width, height, options, rng);
  draw.flip = rng.uniform() < options.flipProbability;
  return draw;
}

RgbImage resizeBicubic(const RgbImage &image, const ResizeBox &box, int outWidth, int outHeight,
                       ResampleOrder order) {
  return resizeView(viewOf(image), box, outWidth, outHeight, order);
}

RgbImage resizedCrop(const RgbImage &image, const CropBox &crop, int outWidth, int outHeight,
                     ResampleOrder order) {
  if (crop.top < 0 || crop.left < 0 || crop.height <= 0 || crop.width <= 0 ||
      crop.top + crop.height > image.height || crop.left + crop.width > image.width)
    throw RuntimeError("resized crop: crop outside the " + std::to_string(image.width) + " x " +
                       std::to_string(image.height) + " image");
  View in = viewOf(image);
  in.data = image.pixel(crop.left, crop.top);
  in.width = crop.width;
  in.height = crop.height;
  return resizeView(in, {0, 0, float(crop.width), float(crop.height)}, outWidth, outHeight, order);
}

void flipHorizontal(RgbImage &image) {
  for (int y = 0; y < image.height; ++y) {
    uint8_t *row = image.rgb.data() + size_t(y) * image.width * 3;
    for (int a = 0, b = image.width - 1; a < b; ++a, --b)
      std::swap_ranges(row + a * 3, row + a * 3 + 3, row + b * 3);
  }
}

void toNormalizedChw(const RgbImage &image, const AugmentOptions &options, float *out) {
  size_t plane = size_t(image.width) * image.height;
  for (int c = 0; c < 3; ++c) {
    // The float32 operations of ToTensor (v / 255) and Normalize ((x - mean) / std), tabulated.
    float table[256];
    for (int v = 0; v < 256; ++v)
      table[v] = (float(v) / 255.0f - options.mean[c]) / options.std[c];
    float *dst = out + c * plane;
    for (size_t p = 0; p < plane; ++p)
      dst[p] = table[image.rgb[p * 3 + c]];
  }
}

void augmentMae(const RgbImage &image, const AugmentOptions &options, uint64_t seed, int64_t epoch,
                int64_t index, float *out) {
  augmentDrawn(image, drawAugment(image.width, image.height, options, seed, epoch, index), 1, options, out);
}

int decodeReduction(const CropBox &crop, int size) {
  for (int reduction : {8, 4, 2})
    if (crop.width >= size * reduction && crop.height >= size * reduction)
      return reduction;
  return 1;
}

void augmentDrawn(const RgbImage &image, const AugmentDraw &draw, int reduction, const AugmentOptions &options,
                  float *out) {
  const CropBox &c = draw.crop;
  RgbImage resized;
  if (reduction == 1) { // torchvision's resized_crop, exactly
    resized = resizedCrop(image, c, options.size, options.size, options.resampleOrder);
  } else {
    const float scale = 1.0f / float(reduction);
    ResizeBox box{c.left * scale, c.top * scale, std::min((c.left + c.width) * scale, float(image.width)),
                  std::min((c.top + c.height) * scale, float(image.height))};
    resized = resizeBicubic(image, box, options.size, options.size, options.resampleOrder);
  }
  if (draw.flip)
    flipHorizontal(resized);
  toNormalizedChw(resized, options, out);
}

void augmentMaeReduced(const RgbImage &reduced, int fullWidth, int fullHeight, int reduction,
                       const AugmentOptions &options, uint64_t seed, int64_t epoch, int64_t index, float *out) {
  augmentDrawn(reduced, drawAugment(fullWidth, fullHeight, options, seed, epoch, index), reduction, options, out);
}

} // namespace cpc::data
