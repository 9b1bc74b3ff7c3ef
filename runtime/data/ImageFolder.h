//===- ImageFolder.h - DIR/<class>/<images>, as torchvision.datasets.ImageFolder -===//
//
// Classes are the subdirectories of DIR sorted by name (byte order, as Python sorts str); a
// class's images are every file under its directory, walked recursively following symlinks,
// ordered as torchvision's sorted(os.walk(...)) then sorted(fnames). Hidden entries (names
// starting with '.') are skipped, class directories included.
//
//===----------------------------------------------------------------------------===//
#ifndef CPC_RUNTIME_DATA_IMAGEFOLDER_H
#define CPC_RUNTIME_DATA_IMAGEFOLDER_H

#include <cstdint>
#include <string>
#include <vector>

namespace cpc::data {

struct ImageSample {
  std::string path;
  int64_t label = 0;
};

/// Whether `name` ends (case-insensitively) in an extension we decode: .jpg .jpeg .png.
bool hasImageExtension(const std::string &name);

class ImageFolder {
public:
  /// Scans `root`; throws cpc::RuntimeError naming `root` when it is missing, not a directory,
  /// has no class directory, or no image at all.
  explicit ImageFolder(const std::string &root);

  const std::string &root() const { return root_; }
  const std::vector<std::string> &classes() const { return classes_; }
  const std::vector<ImageSample> &samples() const { return samples_; }
  size_t size() const { return samples_.size(); }

private:
  std::string root_;
  std::vector<std::string> classes_;
  std::vector<ImageSample> samples_;
};

} // namespace cpc::data

#endif
