//===- DataTestUtil.h - image writers and a scratch directory for the data tests -===//
#ifndef CPC_TESTS_UNIT_RUNTIME_DATATESTUTIL_H
#define CPC_TESTS_UNIT_RUNTIME_DATATESTUTIL_H

#include "runtime/data/ImageDecode.h"

#include <gtest/gtest.h>

#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <jpeglib.h>
#include <png.h>

namespace cpc::data::test {

/// A fresh directory under the test temp dir, removed with everything in it at scope exit.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::path(::testing::TempDir()) /
           ("cpc-data-" + std::to_string(::getpid()) + "-" + info->test_suite_name() + "." + info->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string &name) const { return (path / name).string(); }
};

/// A smooth gradient with some detail (JPEG-friendly), width x height RGB.
inline RgbImage gradientImage(int width, int height, int salt = 0) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.rgb.resize(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      uint8_t *p = &image.rgb[(size_t(y) * width + x) * 3];
      p[0] = uint8_t((x * 255) / std::max(width - 1, 1));
      p[1] = uint8_t((y * 255) / std::max(height - 1, 1));
      p[2] = uint8_t((x + y + salt * 37) % 256);
    }
  return image;
}

/// Writes 8-bit samples with `components` 1 (gray), 3 (RGB) or 4 (CMYK, Adobe-inverted).
inline void writeJpeg(const std::string &path, int width, int height, int components,
                      const std::vector<uint8_t> &samples, int quality) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err); // a writer error here aborts the test binary: fine for a test
  jpeg_create_compress(&cinfo);
  std::FILE *file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t *>(&samples[size_t(cinfo.next_scanline) * width * components]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(file);
}

inline void writeJpeg(const std::string &path, const RgbImage &image, int quality = 95) {
  writeJpeg(path, image.width, image.height, 3, image.rgb, quality);
}

/// Writes rows of raw PNG samples (16-bit big-endian) of `colorType` and `bitDepth`; `palette`
/// (RGB triples) and `alphas` (tRNS) for palette images.
inline void writePng(const std::string &path, int width, int height, int colorType, int bitDepth,
                     const std::vector<uint8_t> &rows, const std::vector<uint8_t> &palette = {},
                     const std::vector<uint8_t> &alphas = {}, bool interlaced = false) {
  std::FILE *file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(file);
    FAIL() << "libpng could not write " << path;
  }
  png_init_io(png, file);
  png_set_IHDR(png, info, width, height, bitDepth, colorType,
               interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty())
    png_set_PLTE(png, info, reinterpret_cast<png_const_colorp>(palette.data()), int(palette.size() / 3));
  if (!alphas.empty())
    png_set_tRNS(png, info, alphas.data(), int(alphas.size()), nullptr);
  png_write_info(png, info);
  size_t rowBytes = rows.size() / height;
  std::vector<png_bytep> pointers(height);
  for (int y = 0; y < height; ++y)
    pointers[y] = const_cast<png_bytep>(&rows[size_t(y) * rowBytes]);
  png_write_image(png, pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(file);
}

inline void writePng(const std::string &path, const RgbImage &image, bool interlaced = false) {
  writePng(path, image.width, image.height, PNG_COLOR_TYPE_RGB, 8, image.rgb, {}, {}, interlaced);
}

inline void writeBytes(const std::string &path, const uint8_t *data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char *>(data), std::streamsize(size));
}

} // namespace cpc::data::test

#endif
