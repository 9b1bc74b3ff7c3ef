//===- ImageDecode.h - JPEG and PNG files to 8-bit interleaved RGB -------------===//
//
// What torchvision's loader gets from `Image.open(f).convert("RGB")`: grayscale is replicated,
// palettes are looked up, alpha is dropped (not composited), 16-bit samples keep their high
// byte, and CMYK JPEGs are converted the way Pillow does (Adobe-inverted CMYK). The format comes
// from the magic bytes, never the extension (ImageNet has PNGs named .JPEG).
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_DATA_IMAGEDECODE_H
#define CPC_RUNTIME_DATA_IMAGEDECODE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cpc::data {

/// An 8-bit RGB image, rows top to bottom, pixels interleaved (R, G, B).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb; // width * height * 3

  const uint8_t *pixel(int x, int y) const { return rgb.data() + (size_t(y) * width + x) * 3; }
};

enum class ImageFormat { Unknown, Jpeg, Png };

/// The format named by the first bytes (JPEG's SOI + marker, PNG's 8-byte signature).
ImageFormat detectImageFormat(const uint8_t *data, size_t size);

/// Decodes an in-memory JPEG or PNG; `name` (a path) starts every error message. Throws
/// cpc::RuntimeError with one line on a corrupt, truncated, unsupported or non-image input.
/// A JPEG is decoded at 1/`reduction` (1, 2, 4 or 8) of its size in libjpeg's DCT domain
/// (ceil(W / reduction) x ceil(H / reduction), several times faster); a PNG always whole.
RgbImage decodeImage(const uint8_t *data, size_t size, const std::string &name, int reduction = 1);

/// An image's format and full size from its header alone. Throws as decodeImage.
struct ImageSize {
  ImageFormat format = ImageFormat::Unknown;
  int width = 0, height = 0;
};
ImageSize readImageSize(const uint8_t *data, size_t size, const std::string &name);

/// Reads and decodes a file; throws cpc::RuntimeError naming the file.
RgbImage decodeImageFile(const std::string &path);

/// The whole file's bytes; throws cpc::RuntimeError naming the file.
std::vector<uint8_t> readFileBytes(const std::string &path);

} // namespace cpc::data

#endif
