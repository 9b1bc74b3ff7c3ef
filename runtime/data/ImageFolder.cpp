//===- ImageFolder.cpp - scanning DIR/<class>/<images> --------------------------===//
#include "runtime/data/ImageFolder.h"

#include "kernels/Tensor.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <utility>

#include <sys/stat.h>

namespace fs = std::filesystem;

namespace cpc::data {
namespace {

bool hidden(const fs::path &path) { return path.filename().string().rfind('.', 0) == 0; }

/// A directory's identity, so a symlink cycle is walked once (os.walk would loop forever).
std::pair<uintmax_t, uintmax_t> identity(const fs::path &dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return {0, 0};
  return {uintmax_t(st.st_dev), uintmax_t(st.st_ino)};
}

// Appends (directory, file name) of every image under `dir`; directories whose entries cannot
// be listed are skipped, as os.walk skips them.
void walk(const fs::path &dir, std::set<std::pair<uintmax_t, uintmax_t>> &seen,
          std::vector<std::pair<std::string, std::string>> &files) {
  if (!seen.insert(identity(dir)).second)
    return;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  std::vector<fs::path> subdirs;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path &path = it->path();
    if (hidden(path))
      continue;
    std::error_code statError;
    if (fs::is_directory(path, statError)) // follows symlinks
      subdirs.push_back(path);
    else if (fs::is_regular_file(path, statError) && hasImageExtension(path.filename().string()))
      files.emplace_back(dir.string(), path.filename().string());
  }
  for (const fs::path &sub : subdirs)
    walk(sub, seen, files);
}

} // namespace

bool hasImageExtension(const std::string &name) {
  size_t dot = name.rfind('.');
  if (dot == std::string::npos)
    return false;
  std::string ext = name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == "jpg" || ext == "jpeg" || ext == "png";
}

ImageFolder::ImageFolder(const std::string &root) : root_(root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw RuntimeError(root + ": " + (fs::exists(root, ec) ? "not a directory" : "no such directory") +
                       " (expected DIR/<class>/<images>)");
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code statError;
    if (!hidden(it->path()) && fs::is_directory(it->path(), statError))
      classes_.push_back(it->path().filename().string());
  }
  if (ec)
    throw RuntimeError(root + ": cannot list the directory (" + ec.message() + ")");
  std::sort(classes_.begin(), classes_.end());
  for (size_t label = 0; label < classes_.size(); ++label) {
    std::set<std::pair<uintmax_t, uintmax_t>> seen;
    std::vector<std::pair<std::string, std::string>> files;
    walk(fs::path(root) / classes_[label], seen, files);
    // sorted(os.walk(...)) orders directories by path, then sorted(fnames) within each.
    std::sort(files.begin(), files.end());
    for (auto &[dir, name] : files)
      samples_.push_back({(fs::path(dir) / name).string(), int64_t(label)});
  }
  if (classes_.empty())
    throw RuntimeError(root + ": no class directories (expected DIR/<class>/<images>)");
  if (samples_.empty())
    throw RuntimeError(root + ": no .jpg, .jpeg or .png images in its " + std::to_string(classes_.size()) +
                       " class directories");
}

} // namespace cpc::data
