//===- Augment.h - MAE's training augmentation, as torchvision does it on PIL --===//
//
// transforms.Compose([RandomResizedCrop(S, scale=(0.2, 1.0), interpolation=BICUBIC),
//                     RandomHorizontalFlip(), ToTensor(), Normalize(mean, std)])
// with torchvision's crop sampling (RandomResizedCrop.get_params) and Pillow's resampling
// (ImagingResample, 8-bit fixed point), but every random number drawn from CounterRng keyed by
// (seed, epoch, sample index): a sample's augmentation is the same on any thread or rank.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_DATA_AUGMENT_H
#define CPC_RUNTIME_DATA_AUGMENT_H

#include "runtime/data/ImageDecode.h"
#include "runtime/data/Random.h"

#include <array>

namespace cpc::data {

/// Pillow's order of the two resampling passes, which changes the 8-bit rounding between them.
/// Pillow <= 12 (Debian 12's python3-pil, MAE's published runs) always runs the horizontal pass
/// first; Pillow 13 runs the vertical one first when the height shrinks by more than twice as
/// many pixels as the width does.
enum class ResampleOrder { HorizontalFirst, Pillow13 };

struct AugmentOptions {
  int size = 224;                                  // output S x S
  double scaleMin = 0.2, scaleMax = 1.0;           // crop area fraction
  double ratioMin = 3.0 / 4.0, ratioMax = 4.0 / 3.0; // crop aspect ratio w / h
  double flipProbability = 0.5;
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  ResampleOrder resampleOrder = ResampleOrder::HorizontalFirst;
};

/// A crop rectangle as torchvision returns it: top row i, left column j, height h, width w.
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};

/// RandomResizedCrop.get_params on a width x height image: 10 tries of area * U(scale) and
/// exp(U(log ratio)), rounded half to even as Python's round; then the ratio-clamped centre crop.
CropBox sampleCropBox(int width, int height, const AugmentOptions &options, CounterRng &rng);

/// The random choices of one sample, drawn in torchvision's order (crop, then flip).
struct AugmentDraw {
  CropBox crop;
  bool flip = false;
};
AugmentDraw drawAugment(int width, int height, const AugmentOptions &options, uint64_t seed,
                        int64_t epoch, int64_t index);

/// A source rectangle in pixels (Pillow's box: left, upper, right, lower; fractional allowed).
struct ResizeBox {
  float left = 0, top = 0, right = 0, bottom = 0;
};

/// Pillow's `img.resize((outWidth, outHeight), Image.BICUBIC, box=box)` on an 8-bit RGB image:
/// separable passes in `order`, bicubic (a = -0.5) widened by the downscale factor
/// (antialiasing), 22-bit fixed-point coefficients, clipped to uint8 between passes.
RgbImage resizeBicubic(const RgbImage &image, const ResizeBox &box, int outWidth, int outHeight,
                       ResampleOrder order = ResampleOrder::HorizontalFirst);

/// torchvision's F.resized_crop on PIL: `img.crop(crop).resize((S, S), BICUBIC)`. Unlike a
/// resize with box=crop, the filter sees no pixel outside the crop.
RgbImage resizedCrop(const RgbImage &image, const CropBox &crop, int outWidth, int outHeight,
                     ResampleOrder order = ResampleOrder::HorizontalFirst);

void flipHorizontal(RgbImage &image);

/// ToTensor + Normalize in float32 as torch computes them: (v / 255 - mean[c]) / std[c],
/// written channel-major (3 x H x W) to `out`.
void toNormalizedChw(const RgbImage &image, const AugmentOptions &options, float *out);

/// The whole pipeline for sample `index` of `epoch`: writes 3 x S x S floats to `out`.
void augmentMae(const RgbImage &image, const AugmentOptions &options, uint64_t seed, int64_t epoch,
                int64_t index, float *out);

/// How much a JPEG decoder may shrink the image before `crop` is resized to S x S: the largest
/// of 8, 4 and 2 that leaves the crop at least S pixels on each side, else 1.
int decodeReduction(const CropBox &crop, int size);
/// The pipeline after the draw: `draw` (made for the full image) applied to `image`, that image
/// decoded at 1/`reduction` (1: augmentMae's torchvision crop; else the crop scaled to it as a
/// fractional box, Pillow's resize box).
void augmentDrawn(const RgbImage &image, const AugmentDraw &draw, int reduction, const AugmentOptions &options,
                  float *out);
/// The fast path (DALI's and Pillow's draft decoding): augmentMae on `reduced`, the image of
/// `fullWidth` x `fullHeight` decoded at 1/`reduction`. The draw is the full image's; its crop is
/// taken from the reduced image as a fractional box (Pillow's resize box). With reduction 1 it
/// is augmentMae exactly.
void augmentMaeReduced(const RgbImage &reduced, int fullWidth, int fullHeight, int reduction,
                       const AugmentOptions &options, uint64_t seed, int64_t epoch, int64_t index, float *out);

} // namespace cpc::data

#endif
