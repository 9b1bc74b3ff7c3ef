//===- ImageDecode.cpp - JPEG (libjpeg-turbo) and PNG (libpng) to RGB ----------===//
//
// Both libraries report errors by longjmp. Each function that calls setjmp holds only trivially
// destructible locals, and the libraries' state lives in an RAII reader owned by the caller, so
// a longjmp skips no destructor and every error path frees the decoder (no abort, no leak).
//
//===----------------------------------------------------------------------------===//
#include "runtime/data/ImageDecode.h"

#include "kernels/Tensor.h"

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <algorithm>
#include <cstdint>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
// jpeglib.h first: jerror.h needs its types.
#include <jerror.h>
#include <png.h>

namespace cpc::data {
namespace {

// Refused before allocating: a corrupt header could otherwise ask for many gigabytes
// (ImageNet's largest image is about 5000 x 5000).
constexpr int64_t kMaxPixels = int64_t(1) << 28;

[[noreturn]] void fail(const std::string &name, const std::string &what) {
  throw RuntimeError(name + ": " + what);
}

void checkDimensions(const std::string &name, int64_t width, int64_t height) {
  if (width <= 0 || height <= 0)
    fail(name, "image has no pixels (" + std::to_string(width) + " x " + std::to_string(height) + ")");
  if (width * height > kMaxPixels)
    fail(name, "image too large (" + std::to_string(width) + " x " + std::to_string(height) + ")");
}

//===--- JPEG -----------------------------------------------------------------===//

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpegErrorExit(j_common_ptr cinfo) {
  auto *err = reinterpret_cast<JpegError *>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// libjpeg only warns at a premature end of data and pads the image with gray; Pillow refuses
// such a file ("image file is truncated"), so it is an error here too. Other corrupt-data
// warnings (extraneous bytes before a marker, common in ImageNet) pass, as they do in Pillow.
void jpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
    jpegErrorExit(cinfo);
}

struct JpegReader {
  jpeg_decompress_struct cinfo;
  JpegError err;

  JpegReader() {
    std::memset(&cinfo, 0, sizeof cinfo); // jpeg_destroy is then safe before jpeg_create
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpegErrorExit;
    err.mgr.emit_message = jpegEmitMessage;
    err.message[0] = 0;
  }
  ~JpegReader() { jpeg_destroy_decompress(&cinfo); }
  JpegReader(const JpegReader &) = delete;
  JpegReader &operator=(const JpegReader &) = delete;
};

bool jpegReadHeader(JpegReader &r, const uint8_t *data, size_t size, int reduction = 1) {
  if (setjmp(r.err.jump))
    return false;
  jpeg_create_decompress(&r.cinfo);
  jpeg_mem_src(&r.cinfo, data, (unsigned long)size);
  jpeg_read_header(&r.cinfo, TRUE);
  // libjpeg-turbo converts gray and YCbCr to RGB, but not CMYK: that comes out as CMYK.
  J_COLOR_SPACE in = r.cinfo.jpeg_color_space;
  r.cinfo.out_color_space = (in == JCS_CMYK || in == JCS_YCCK) ? JCS_CMYK : JCS_RGB;
  r.cinfo.scale_num = 1; // 1/reduction in the DCT domain: fewer coefficients to transform
  r.cinfo.scale_denom = (unsigned)reduction;
  jpeg_calc_output_dimensions(&r.cinfo);
  return true;
}

bool jpegReadRows(JpegReader &r, uint8_t *dst, size_t rowBytes) {
  if (setjmp(r.err.jump))
    return false;
  jpeg_start_decompress(&r.cinfo);
  while (r.cinfo.output_scanline < r.cinfo.output_height) {
    JSAMPROW row = dst + size_t(r.cinfo.output_scanline) * rowBytes;
    jpeg_read_scanlines(&r.cinfo, &row, 1);
  }
  // No jpeg_finish_decompress: every row is read, and a missing EOI after them is harmless.
  return true;
}

// Pillow reads JPEG CMYK as Adobe-inverted ("CMYK;I") and converts with cmyk2rgb:
// R = nk - nk * C / 255 with nk = 255 - K (rounded by MULDIV255), on the inverted values.
uint8_t cmykChannel(uint8_t stored, uint8_t storedK) {
  int c = 255 - stored, nk = storedK; // nk = 255 - (255 - storedK)
  int tmp = c * nk + 128;
  int v = nk - (((tmp >> 8) + tmp) >> 8);
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

RgbImage decodeJpeg(const uint8_t *data, size_t size, const std::string &name, int reduction) {
  JpegReader r;
  if (!jpegReadHeader(r, data, size, reduction))
    fail(name, std::string("cannot decode JPEG: ") + r.err.message);
  checkDimensions(name, r.cinfo.image_width, r.cinfo.image_height);
  RgbImage img;
  img.width = int(r.cinfo.output_width);
  img.height = int(r.cinfo.output_height);
  img.rgb.resize(size_t(img.width) * img.height * 3);
  bool cmyk = r.cinfo.out_color_space == JCS_CMYK;
  std::vector<uint8_t> raw(cmyk ? size_t(img.width) * img.height * 4 : 0);
  uint8_t *dst = cmyk ? raw.data() : img.rgb.data();
  if (!jpegReadRows(r, dst, size_t(img.width) * (cmyk ? 4 : 3)))
    fail(name, std::string("cannot decode JPEG: ") + r.err.message);
  for (size_t p = 0; cmyk && p < size_t(img.width) * img.height; ++p)
    for (int c = 0; c < 3; ++c)
      img.rgb[p * 3 + c] = cmykChannel(raw[p * 4 + c], raw[p * 4 + 3]);
  return img;
}

//===--- PNG ------------------------------------------------------------------===//

struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t *data = nullptr;
  size_t size = 0, pos = 0;
  char message[256] = "";

  ~PngReader() {
    if (png)
      png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

void pngError(png_structp png, png_const_charp msg) {
  auto *r = static_cast<PngReader *>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(png, 1);
}

void pngWarning(png_structp, png_const_charp) {} // e.g. sRGB profile notes: Pillow ignores them

void pngRead(png_structp png, png_bytep out, size_t n) {
  auto *r = static_cast<PngReader *>(png_get_io_ptr(png));
  if (r->size - r->pos < n)
    png_error(png, "file ends early (truncated)");
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

// Asks libpng for 8-bit RGB, plus alpha when the file has any (dropped afterwards).
bool pngReadInfo(PngReader &r) {
  if (setjmp(png_jmpbuf(r.png)))
    return false;
  png_set_read_fn(r.png, &r, pngRead);
  png_read_info(r.png, r.info);
  int colorType = png_get_color_type(r.png, r.info);
  int bitDepth = png_get_bit_depth(r.png, r.info);
  if (bitDepth == 16)
    png_set_strip_16(r.png); // the high byte, as Pillow's "RGB;16B" unpacking keeps
  if (colorType == PNG_COLOR_TYPE_PALETTE)
    png_set_palette_to_rgb(r.png);
  if (colorType == PNG_COLOR_TYPE_GRAY || colorType == PNG_COLOR_TYPE_GRAY_ALPHA) {
    if (bitDepth < 8)
      png_set_expand_gray_1_2_4_to_8(r.png);
    png_set_gray_to_rgb(r.png);
  }
  png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  return true;
}

bool pngReadRows(PngReader &r, png_bytepp rows) {
  if (setjmp(png_jmpbuf(r.png)))
    return false;
  png_read_image(r.png, rows);
  return true;
}

RgbImage decodePng(const uint8_t *data, size_t size, const std::string &name) {
  PngReader r;
  r.data = data;
  r.size = size;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, pngError, pngWarning);
  r.info = r.png ? png_create_info_struct(r.png) : nullptr;
  if (!r.png || !r.info)
    fail(name, "cannot start the PNG decoder");
  if (!pngReadInfo(r))
    fail(name, std::string("cannot decode PNG: ") + r.message);
  int64_t width = png_get_image_width(r.png, r.info), height = png_get_image_height(r.png, r.info);
  checkDimensions(name, width, height);
  int channels = png_get_channels(r.png, r.info);
  size_t rowBytes = png_get_rowbytes(r.png, r.info);
  if ((channels != 3 && channels != 4) || rowBytes != size_t(width) * channels)
    fail(name, "PNG decoded to " + std::to_string(channels) + " channels, expected RGB or RGBA");
  RgbImage img;
  img.width = int(width);
  img.height = int(height);
  img.rgb.resize(size_t(width) * height * 3);
  std::vector<uint8_t> rgba(channels == 4 ? size_t(width) * height * 4 : 0);
  uint8_t *dst = channels == 4 ? rgba.data() : img.rgb.data();
  std::vector<png_bytep> rows(height);
  for (int64_t y = 0; y < height; ++y)
    rows[y] = dst + size_t(y) * rowBytes;
  if (!pngReadRows(r, rows.data()))
    fail(name, std::string("cannot decode PNG: ") + r.message);
  for (size_t p = 0; channels == 4 && p < size_t(width) * height; ++p)
    std::memcpy(&img.rgb[p * 3], &rgba[p * 4], 3);
  return img;
}

struct FileHandle {
  int fd;
  ~FileHandle() {
    if (fd >= 0)
      ::close(fd);
  }
};

} // namespace

ImageFormat detectImageFormat(const uint8_t *data, size_t size) {
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
    return ImageFormat::Jpeg;
  if (size >= 8 && std::memcmp(data, png, 8) == 0)
    return ImageFormat::Png;
  return ImageFormat::Unknown;
}

[[noreturn]] void failNotAnImage(const uint8_t *data, size_t size, const std::string &name) {
  if (size == 0)
    fail(name, "empty file, not an image");
  char head[64];
  std::snprintf(head, sizeof head, "0x%02x 0x%02x", data[0], size > 1 ? data[1] : 0);
  fail(name, std::string("not a JPEG or PNG image (starts with ") + head + ")");
}

RgbImage decodeImage(const uint8_t *data, size_t size, const std::string &name, int reduction) {
  if (reduction != 1 && reduction != 2 && reduction != 4 && reduction != 8)
    fail(name, "cannot decode at 1/" + std::to_string(reduction) + " (1, 2, 4 or 8)");
  switch (detectImageFormat(data, size)) {
  case ImageFormat::Jpeg:
    return decodeJpeg(data, size, name, reduction);
  case ImageFormat::Png:
    return decodePng(data, size, name);
  case ImageFormat::Unknown:
    break;
  }
  failNotAnImage(data, size, name);
}

ImageSize readImageSize(const uint8_t *data, size_t size, const std::string &name) {
  ImageSize out;
  out.format = detectImageFormat(data, size);
  if (out.format == ImageFormat::Jpeg) {
    JpegReader r;
    if (!jpegReadHeader(r, data, size))
      fail(name, std::string("cannot decode JPEG: ") + r.err.message);
    out.width = int(r.cinfo.image_width);
    out.height = int(r.cinfo.image_height);
  } else if (out.format == ImageFormat::Png) {
    if (size < 24) // signature, IHDR's length and type, then its width and height (big-endian)
      fail(name, "cannot decode PNG: truncated before its header");
    auto be32 = [&](size_t at) { return int64_t(data[at]) << 24 | data[at + 1] << 16 | data[at + 2] << 8 | data[at + 3]; };
    out.width = int(std::min<int64_t>(be32(16), INT32_MAX));
    out.height = int(std::min<int64_t>(be32(20), INT32_MAX));
  } else {
    failNotAnImage(data, size, name);
  }
  checkDimensions(name, out.width, out.height);
  return out;
}

std::vector<uint8_t> readFileBytes(const std::string &path) {
  FileHandle file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat st;
  if (file.fd < 0 || ::fstat(file.fd, &st) != 0)
    fail(path, std::string("cannot read (") + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode))
    fail(path, "not a regular file");
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t got = ::read(file.fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      fail(path, got < 0 ? std::string("read failed (") + std::strerror(errno) + ")" : "file shrank while read");
    done += size_t(got);
  }
  return bytes;
}

RgbImage decodeImageFile(const std::string &path) {
  std::vector<uint8_t> bytes = readFileBytes(path);
  return decodeImage(bytes.data(), bytes.size(), path);
}

} // namespace cpc::data
