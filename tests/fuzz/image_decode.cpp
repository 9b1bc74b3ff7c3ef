//===- image_decode.cpp - fuzz the dataset's image decoding (JPEG, PNG) -----===//
//
// The first byte picks the reduction a JPEG is decoded at (1, 2, 4 or 8), the rest is an image
// file as `cpc-run --data DIR` reads one: its size from the header, the decode, then MAE's
// augmentation at 16 x 16 (the fast path where the reduction applies). A decoded image must be
// self-consistent: width x height x 3 bytes, the header's size (reduced: rounded up).
//
#include "kernels/Tensor.h"
#include "runtime/data/Augment.h"
#include "runtime/data/ImageDecode.h"
#include "tests/fuzz/FuzzUtil.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const int reduction = 1 << (data[0] % 4);
  const uint8_t *file = data + 1;
  const size_t bytes = size - 1;
  using namespace cpc::data;
  ImageSize full;
  RgbImage image;
  try {
    full = readImageSize(file, bytes, "fuzz.img");
    image = decodeImage(file, bytes, "fuzz.img", reduction);
  } catch (const cpc::RuntimeError &) {
    return 0;
  }
  if (image.width <= 0 || image.height <= 0 || image.rgb.size() != size_t(image.width) * image.height * 3)
    cpc::fuzz::finding("decodeImage returned " + std::to_string(image.rgb.size()) + " bytes for " +
                       std::to_string(image.width) + " x " + std::to_string(image.height));
  const int r = full.format == ImageFormat::Jpeg ? reduction : 1;
  if (image.width != (full.width + r - 1) / r || image.height != (full.height + r - 1) / r)
    cpc::fuzz::finding("the header says " + std::to_string(full.width) + " x " + std::to_string(full.height) +
                       ", the decode at 1/" + std::to_string(r) + " gave " + std::to_string(image.width) + " x " +
                       std::to_string(image.height));
  AugmentOptions options;
  options.size = 16;
  std::vector<float> out(3 * 16 * 16);
  int fit = decodeReduction(drawAugment(full.width, full.height, options, 1, 0, 0).crop, options.size);
  if (r == 1 || fit == r) // the reduction the loader would have picked for this draw
    augmentMaeReduced(image, full.width, full.height, r, options, 1, 0, 0, out.data());
  return 0;
}
