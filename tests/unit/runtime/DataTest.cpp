//===- DataTest.cpp - image decoding and MAE augmentation (runtime/data) -------===//
#include "DataTestUtil.h"

#include "kernels/Tensor.h"
#include "runtime/data/Augment.h"
#include "runtime/data/ImageDecode.h"

#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

// What Pillow 12 and 13 make of a synthetic image (data_fixtures/make_fixtures.py).
struct ResizeCase {
  const char *mode; // "box": resize(size, BICUBIC, box); "crop": crop(box).resize(size, BICUBIC)
  float box[4];
  int width, height;
  const unsigned char *expected;
};
#include "data_fixtures/pil12_resize.inc"
#include "data_fixtures/pil13_resize.inc"
#include "data_fixtures/pil_codec.inc"

using namespace cpc;
using cpc::test::errorOf;
using namespace cpc::data;
using namespace cpc::data::test;

namespace {

int maxDifference(const RgbImage &a, const RgbImage &b) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  int worst = 0;
  for (size_t i = 0; i < std::min(a.rgb.size(), b.rgb.size()); ++i)
    worst = std::max(worst, std::abs(int(a.rgb[i]) - int(b.rgb[i])));
  return worst;
}

// The synthetic image make_fixtures.py builds (its source()).
RgbImage fixtureSource() {
  RgbImage image;
  image.width = pil_codec::kWidth;
  image.height = pil_codec::kHeight;
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x) {
      image.rgb.push_back(uint8_t((x * 37 + y * 11) & 255));
      image.rgb.push_back(uint8_t((x / 4 + y / 3) % 2 == 1 ? 255 : 20));
      image.rgb.push_back(uint8_t((x * x * 3 + y * 17 + x * y) & 255));
    }
  return image;
}

//===--- decoding -------------------------------------------------------------===//

// Tests that an RGB PNG (plain and interlaced) decodes to exactly the pixels written.
TEST(DataDecodeTest, PngRoundTripIsExact) {
  ScratchDir dir;
  RgbImage image = gradientImage(41, 23);
  writePng(dir / "a.png", image);
  writePng(dir / "b.png", image, /*interlaced=*/true);
  for (const char *name : {"a.png", "b.png"}) {
    RgbImage back = decodeImageFile(dir / name);
    EXPECT_EQ(back.width, 41);
    EXPECT_EQ(back.height, 23);
    EXPECT_EQ(back.rgb, image.rgb) << name;
  }
}

// Tests gray (8 and 4 bit), gray+alpha, palette with tRNS, 16-bit RGB and RGBA PNGs: gray is
// replicated, palettes looked up, 16-bit samples keep their high byte, alpha is dropped.
TEST(DataDecodeTest, PngGrayPaletteSixteenBitAndAlphaBecomeRgb) {
  ScratchDir dir;
  writePng(dir / "gray.png", 3, 1, PNG_COLOR_TYPE_GRAY, 8, {0, 100, 255});
  writePng(dir / "gray4.png", 2, 1, PNG_COLOR_TYPE_GRAY, 4, {0x3F}); // 3 -> 51, 15 -> 255
  writePng(dir / "ga.png", 2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, {7, 0, 9, 255});
  writePng(dir / "pal.png", 3, 1, PNG_COLOR_TYPE_PALETTE, 8, {2, 0, 1},
           {10, 20, 30, 40, 50, 60, 70, 80, 90}, {0, 128});
  writePng(dir / "rgb16.png", 2, 1, PNG_COLOR_TYPE_RGB, 16, {1, 2, 3, 4, 5, 6, 250, 255, 0, 9, 128, 0});
  writePng(dir / "rgba.png", 2, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, {1, 2, 3, 0, 4, 5, 6, 200});
  EXPECT_EQ(decodeImageFile(dir / "gray.png").rgb, (std::vector<uint8_t>{0, 0, 0, 100, 100, 100, 255, 255, 255}));
  EXPECT_EQ(decodeImageFile(dir / "gray4.png").rgb, (std::vector<uint8_t>{51, 51, 51, 255, 255, 255}));
  EXPECT_EQ(decodeImageFile(dir / "ga.png").rgb, (std::vector<uint8_t>{7, 7, 7, 9, 9, 9}));
  EXPECT_EQ(decodeImageFile(dir / "pal.png").rgb, (std::vector<uint8_t>{70, 80, 90, 10, 20, 30, 40, 50, 60}));
  EXPECT_EQ(decodeImageFile(dir / "rgb16.png").rgb, (std::vector<uint8_t>{1, 3, 5, 250, 0, 128}));
  EXPECT_EQ(decodeImageFile(dir / "rgba.png").rgb, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
}

// Tests that a quality-95 JPEG decodes close to what was written, and a gray one to R = G = B.
TEST(DataDecodeTest, JpegRoundTripAndGrayscale) {
  ScratchDir dir;
  RgbImage image = gradientImage(64, 48);
  writeJpeg(dir / "a.jpg", image, 95);
  RgbImage back = decodeImageFile(dir / "a.jpg");
  double total = 0;
  for (size_t i = 0; i < image.rgb.size(); ++i)
    total += std::abs(int(back.rgb[i]) - int(image.rgb[i]));
  EXPECT_LT(total / image.rgb.size(), 2.0);
  EXPECT_LE(maxDifference(back, image), 24);

  std::vector<uint8_t> gray(30 * 20);
  for (size_t i = 0; i < gray.size(); ++i)
    gray[i] = uint8_t(i % 200);
  writeJpeg(dir / "g.jpg", 30, 20, 1, gray, 95);
  RgbImage g = decodeImageFile(dir / "g.jpg");
  ASSERT_EQ(g.rgb.size(), size_t(30 * 20 * 3));
  for (size_t p = 0; p < gray.size(); ++p) {
    EXPECT_EQ(g.rgb[p * 3], g.rgb[p * 3 + 1]);
    EXPECT_EQ(g.rgb[p * 3], g.rgb[p * 3 + 2]);
  }
}

// Tests that a CMYK JPEG (Adobe-inverted, as libjpeg and Photoshop write it) becomes the RGB
// Pillow's convert("RGB") gives: about stored C * stored K / 255 per channel.
TEST(DataDecodeTest, CmykJpegConvertsAsPillowDoes) {
  ScratchDir dir;
  std::vector<uint8_t> cmyk;
  for (int p = 0; p < 16 * 16; ++p)
    cmyk.insert(cmyk.end(), {200, 100, 255, 128});
  writeJpeg(dir / "c.jpg", 16, 16, 4, cmyk, 95);
  RgbImage image = decodeImageFile(dir / "c.jpg");
  ASSERT_EQ(image.width, 16);
  const int want[3] = {200 * 128 / 255, 100 * 128 / 255, 128};
  for (int c = 0; c < 3; ++c)
    EXPECT_NEAR(image.rgb[c], want[c], 3) << "channel " << c;
}

// Tests that the format comes from the magic bytes: a PNG named .jpg decodes.
TEST(DataDecodeTest, FormatComesFromMagicBytes) {
  ScratchDir dir;
  RgbImage image = gradientImage(5, 4);
  writePng(dir / "png.jpg", image);
  EXPECT_EQ(decodeImageFile(dir / "png.jpg").rgb, image.rgb);
  const uint8_t jpeg[] = {0xFF, 0xD8, 0xFF, 0xE0}, png[] = {0x89, 'P', 'N', 'G', 13, 10, 26, 10};
  EXPECT_EQ(detectImageFormat(jpeg, 4), ImageFormat::Jpeg);
  EXPECT_EQ(detectImageFormat(png, 8), ImageFormat::Png);
  EXPECT_EQ(detectImageFormat(png, 7), ImageFormat::Unknown);
}

// Tests that truncated JPEGs and PNGs, a non-image, an empty and a missing file each throw
// one line naming the file (no abort, no gray padding).
TEST(DataDecodeTest, BrokenFilesThrowOneLineNamingTheFile) {
  ScratchDir dir;
  RgbImage image = gradientImage(64, 48);
  writeJpeg(dir / "full.jpg", image);
  writePng(dir / "full.png", image);
  for (const char *name : {"full.jpg", "full.png"}) {
    std::vector<uint8_t> bytes = readFileBytes(dir / name);
    std::string cut = dir / (std::string("cut-") + name);
    writeBytes(cut, bytes.data(), bytes.size() / 2);
    std::string message = errorOf([&] { decodeImageFile(cut); });
    EXPECT_NE(message.find(cut + ": cannot decode"), std::string::npos) << message;
    EXPECT_TRUE(message.find("Premature end") != std::string::npos || message.find("truncated") != std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    std::vector<uint8_t> header(bytes.begin(), bytes.begin() + 40); // only the header
    writeBytes(cut, header.data(), header.size());
    EXPECT_NE(errorOf([&] { decodeImageFile(cut); }).find(cut + ": "), std::string::npos);
  }
  const char text[] = "hello, not an image";
  writeBytes(dir / "t.jpg", reinterpret_cast<const uint8_t *>(text), sizeof text);
  EXPECT_EQ(errorOf([&] { decodeImageFile(dir / "t.jpg"); }),
            dir / "t.jpg" + ": not a JPEG or PNG image (starts with 0x68 0x65)");
  writeBytes(dir / "e.png", nullptr, 0);
  EXPECT_EQ(errorOf([&] { decodeImageFile(dir / "e.png"); }), dir / "e.png" + ": empty file, not an image");
  EXPECT_NE(errorOf([&] { decodeImageFile(dir / "missing.png"); }).find(dir / "missing.png" + ": cannot read"),
            std::string::npos);
}

// Tests that Pillow's PNG of the synthetic image decodes to the formula's pixels, and Pillow's
// JPEG of it to the pixels Pillow decodes (both libjpeg-turbo, islow IDCT, fancy upsampling).
TEST(DataDecodeTest, DecodesWhatPillowWroteAsPillowDoes) {
  RgbImage png = decodeImage(pil_codec::kSourcePng, sizeof pil_codec::kSourcePng, "source.png");
  EXPECT_EQ(png.rgb, fixtureSource().rgb);
  RgbImage jpeg = decodeImage(pil_codec::kJpeg, sizeof pil_codec::kJpeg, "fixture.jpg");
  RgbImage pillow;
  pillow.width = pil_codec::kJpegWidth;
  pillow.height = pil_codec::kJpegHeight;
  pillow.rgb.assign(pil_codec::kJpegDecoded, pil_codec::kJpegDecoded + sizeof pil_codec::kJpegDecoded);
  EXPECT_EQ(maxDifference(jpeg, pillow), 0);
}

//===--- resampling against Pillow --------------------------------------------===//

// Our resize of `source` as one fixture case asks, with the pass order of the Pillow that made it.
RgbImage resizeCase(const RgbImage &source, const ResizeCase &c, ResampleOrder order) {
  if (std::string(c.mode) == "box")
    return resizeBicubic(source, {c.box[0], c.box[1], c.box[2], c.box[3]}, c.width, c.height, order);
  CropBox crop{int(c.box[1]), int(c.box[0]), int(c.box[3] - c.box[1]), int(c.box[2] - c.box[0])};
  return resizedCrop(source, crop, c.width, c.height, order);
}

// Tests our bicubic resize against Pillow's `resize(size, BICUBIC, box)` and torchvision's
// `crop(box).resize(size, BICUBIC)` on downscales, upscales, a skipped pass, a fractional box
// and both pass orders (Pillow 12's, Pillow 13's): at least 99% of values within 1 level. The
// fixed-point arithmetic is Pillow's, so we expect them all equal.
TEST(DataAugmentTest, ResizeMatchesPillow) {
  RgbImage source = fixtureSource();
  size_t values = 0, within1 = 0;
  int worst = 0;
  auto check = [&](const ResizeCase &c, ResampleOrder order, const char *pillow) {
    RgbImage ours = resizeCase(source, c, order);
    ASSERT_EQ(ours.width, c.width);
    ASSERT_EQ(ours.height, c.height);
    int caseWorst = 0;
    for (size_t i = 0; i < ours.rgb.size(); ++i) {
      int d = std::abs(int(ours.rgb[i]) - int(c.expected[i]));
      caseWorst = std::max(caseWorst, d);
      within1 += d <= 1;
      ++values;
    }
    worst = std::max(worst, caseWorst);
    EXPECT_LE(caseWorst, 1) << pillow << " " << c.mode << " box " << c.box[0] << "," << c.box[1] << ","
                            << c.box[2] << "," << c.box[3] << " -> " << c.width << "x" << c.height;
  };
  for (const ResizeCase &c : pil13::kResizeCases)
    check(c, ResampleOrder::Pillow13, "Pillow 13");
  for (const ResizeCase &c : pil12::kResizeCases) {
    check(c, ResampleOrder::HorizontalFirst, "Pillow 12");
    // These cases are there because the order matters: Pillow 12's differs from Pillow 13's.
    EXPECT_NE(resizeCase(source, c, ResampleOrder::Pillow13).rgb, resizeCase(source, c, ResampleOrder::HorizontalFirst).rgb);
  }
  EXPECT_GE(double(within1), 0.99 * values);
  std::printf("resize vs Pillow 12 and 13: %zu values, max difference %d, %.2f%% within 1\n", values, worst,
              100.0 * within1 / values);
}

//===--- crop sampling, flip, normalisation -----------------------------------===//

// Tests that crop boxes are a function of (seed, epoch, index) alone, lie inside the image, and
// have the areas and aspect ratios RandomResizedCrop asks for.
TEST(DataAugmentTest, CropBoxesAreDeterministicAndInBounds) {
  AugmentOptions options;
  const int width = 500, height = 375;
  double areaSum = 0;
  int differentEpoch = 0, n = 4000;
  for (int index = 0; index < n; ++index) {
    AugmentDraw a = drawAugment(width, height, options, 7, 3, index);
    AugmentDraw b = drawAugment(width, height, options, 7, 3, index);
    AugmentDraw e = drawAugment(width, height, options, 7, 4, index);
    EXPECT_EQ(a.crop.top, b.crop.top);
    EXPECT_EQ(a.crop.left, b.crop.left);
    EXPECT_EQ(a.crop.width, b.crop.width);
    EXPECT_EQ(a.flip, b.flip);
    differentEpoch += a.crop.left != e.crop.left || a.crop.width != e.crop.width;
    const CropBox &c = a.crop;
    ASSERT_TRUE(c.top >= 0 && c.left >= 0 && c.width > 0 && c.height > 0 && c.top + c.height <= height &&
                c.left + c.width <= width)
        << c.top << " " << c.left << " " << c.height << " " << c.width;
    double fraction = double(c.width) * c.height / (double(width) * height);
    double ratio = double(c.width) / c.height;
    EXPECT_TRUE(fraction > 0.19 && fraction <= 1.0) << fraction;
    EXPECT_TRUE(ratio > 0.74 && ratio < 1.35) << ratio;
    areaSum += fraction;
  }
  EXPECT_GT(differentEpoch, n * 9 / 10);
  // U(0.2, 1) has mean 0.6; large crops that do not fit are redrawn, pulling it down a little.
  EXPECT_GT(areaSum / n, 0.45);
  EXPECT_LT(areaSum / n, 0.6);
}

// Tests the fallback: when no draw fits (a very wide image), the central crop clamped to the
// largest ratio, as torchvision computes it.
TEST(DataAugmentTest, CropFallsBackToTheClampedCentre) {
  AugmentOptions options;
  CounterRng rng(1, 0, 0, RngStream::Augment);
  CropBox c = sampleCropBox(1000, 10, options, rng);
  EXPECT_EQ(c.height, 10);
  EXPECT_EQ(c.width, 13); // round(10 * 4 / 3)
  EXPECT_EQ(c.top, 0);
  EXPECT_EQ(c.left, (1000 - 13) / 2);
}

// Tests that about half of the samples are flipped.
TEST(DataAugmentTest, FlipRateIsAboutHalf) {
  AugmentOptions options;
  int flips = 0, n = 20000;
  for (int index = 0; index < n; ++index)
    flips += drawAugment(64, 64, options, 11, 0, index).flip;
  EXPECT_NEAR(double(flips) / n, 0.5, 0.02);
}

// Tests flipping, and that normalisation is torch's float32 (v / 255 - mean) / std, channel-major.
TEST(DataAugmentTest, FlipAndNormalize) {
  RgbImage image = gradientImage(3, 2);
  RgbImage flipped = image;
  flipHorizontal(flipped);
  EXPECT_EQ(flipped.pixel(0, 1)[2], image.pixel(2, 1)[2]);
  EXPECT_EQ(flipped.pixel(1, 0)[0], image.pixel(1, 0)[0]);
  AugmentOptions options;
  std::vector<float> out(3 * 6);
  toNormalizedChw(image, options, out.data());
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 6; ++p)
      EXPECT_EQ(out[c * 6 + p], (float(image.rgb[p * 3 + c]) / 255.0f - options.mean[c]) / options.std[c]);
}

// Tests that the whole pipeline is a pure function of (image, seed, epoch, index), and that the
// output is the resized crop, flipped when drawn so, normalised.
TEST(DataAugmentTest, AugmentMaeComposesTheSteps) {
  RgbImage image = gradientImage(120, 90);
  AugmentOptions options;
  options.size = 32;
  for (int index = 0; index < 6; ++index) {
    std::vector<float> a(3 * 32 * 32), b(a.size()), want(a.size());
    augmentMae(image, options, 5, 2, index, a.data());
    augmentMae(image, options, 5, 2, index, b.data());
    EXPECT_EQ(a, b);
    AugmentDraw draw = drawAugment(120, 90, options, 5, 2, index);
    RgbImage resized = resizedCrop(image, draw.crop, 32, 32);
    if (draw.flip)
      flipHorizontal(resized);
    toNormalizedChw(resized, options, want.data());
    EXPECT_EQ(a, want);
  }
}

} // namespace
