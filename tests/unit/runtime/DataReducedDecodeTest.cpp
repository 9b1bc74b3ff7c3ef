//===- DataReducedDecodeTest.cpp - JPEGs decoded at 1/2..1/8 for the crop --===//
#include "DataTestUtil.h"

#include "kernels/Tensor.h"
#include "runtime/data/Augment.h"
#include "runtime/data/ImageDecode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace cpc;
using namespace cpc::data;
using namespace cpc::data::test;

namespace {

/// A smooth photo-like image: low-frequency colour fields (what a reduced decode keeps).
RgbImage smoothImage(int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c)
        image.rgb[(size_t(y) * width + x) * 3 + c] =
            uint8_t(127 + 100 * std::sin(x / (30.0 + 9 * c) + y / (45.0 + 7 * c) + c));
  return image;
}

std::vector<uint8_t> fileBytes(const std::string &path) { return readFileBytes(path); }

} // namespace

// Tests the header read and the reduced sizes: ceil(W / r) x ceil(H / r) for a JPEG, the whole
// image for a PNG, and a reduction other than 1, 2, 4, 8 refused naming the file.
TEST(DataReducedDecodeTest, SizesFromTheHeaderAndReducedDecodes) {
  ScratchDir dir;
  RgbImage image = smoothImage(403, 301);
  writeJpeg(dir / "a.jpg", image, 95);
  writePng(dir / "a.png", image);
  std::vector<uint8_t> jpeg = fileBytes(dir / "a.jpg"), png = fileBytes(dir / "a.png");
  ImageSize size = readImageSize(jpeg.data(), jpeg.size(), "a.jpg");
  EXPECT_EQ(size.format, ImageFormat::Jpeg);
  EXPECT_EQ(size.width, 403);
  EXPECT_EQ(size.height, 301);
  ImageSize pngSize = readImageSize(png.data(), png.size(), "a.png");
  EXPECT_EQ(pngSize.format, ImageFormat::Png);
  EXPECT_EQ(pngSize.width, 403);
  EXPECT_EQ(pngSize.height, 301);
  for (int r : {1, 2, 4, 8}) {
    RgbImage reduced = decodeImage(jpeg.data(), jpeg.size(), "a.jpg", r);
    EXPECT_EQ(reduced.width, (403 + r - 1) / r) << r;
    EXPECT_EQ(reduced.height, (301 + r - 1) / r) << r;
    EXPECT_EQ(decodeImage(png.data(), png.size(), "a.png", r).width, 403);
  }
  try {
    decodeImage(jpeg.data(), jpeg.size(), "a.jpg", 3);
    FAIL() << "a reduction of 3 decoded";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("a.jpg"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> junk = {'G', 'I', 'F', '8'};
  EXPECT_THROW(readImageSize(junk.data(), junk.size(), "x.gif"), RuntimeError);
}

// Tests which reduction a crop allows: the largest that leaves it S pixels a side.
TEST(DataReducedDecodeTest, ReductionLeavesTheCropAtLeastTheOutputSize) {
  EXPECT_EQ(decodeReduction({0, 0, 300, 300}, 32), 8);
  EXPECT_EQ(decodeReduction({0, 0, 256, 255}, 32), 4);
  EXPECT_EQ(decodeReduction({0, 0, 70, 200}, 32), 2);
  EXPECT_EQ(decodeReduction({0, 0, 63, 400}, 32), 1);
  EXPECT_EQ(decodeReduction({0, 0, 500, 375}, 224), 1);
}

// Tests that the fast path gives what the exact one gives, up to the resampling's rounding, on
// many draws (crops, flips) of a smooth photo, and exactly it where the crop allows no reduction.
TEST(DataReducedDecodeTest, ReducedAugmentationIsCloseToTheExactOne) {
  ScratchDir dir;
  writeJpeg(dir / "p.jpg", smoothImage(500, 375), 95);
  std::vector<uint8_t> bytes = fileBytes(dir / "p.jpg");
  RgbImage whole = decodeImage(bytes.data(), bytes.size(), "p.jpg");
  AugmentOptions options;
  options.size = 32;
  const size_t n = 3 * 32 * 32;
  int reducedDraws = 0;
  for (int64_t index = 0; index < 40; ++index) {
    std::vector<float> exact(n), fast(n);
    augmentMae(whole, options, 7, 0, index, exact.data());
    int r = decodeReduction(drawAugment(500, 375, options, 7, 0, index).crop, options.size);
    RgbImage reduced = decodeImage(bytes.data(), bytes.size(), "p.jpg", r);
    augmentMaeReduced(reduced, 500, 375, r, options, 7, 0, index, fast.data());
    double diff = 0;
    for (size_t i = 0; i < n; ++i)
      diff += std::abs(exact[i] - fast[i]);
    diff /= n;
    if (r == 1)
      EXPECT_EQ(diff, 0.0) << index;
    else
      EXPECT_LT(diff, 0.06) << "index " << index << ", 1/" << r; // 0.06 of a std: ~3.5 levels in 255
    reducedDraws += r > 1;
  }
  EXPECT_GT(reducedDraws, 20); // most crops of a 500x375 photo allow 1/4 or 1/8 at S = 32
}
