//===- FuzzUtil.h - shared helpers of the libFuzzer targets ---------------===//
//
// The readers under test take file paths, so each target writes its input to a file in a private
// temporary directory (one per process; parallel -jobs/-workers runs do not collide) and passes
// that path on. Expected failures are C++ exceptions derived from std::runtime_error (ImportError,
// RuntimeError, ConfigError, ...): a target catches those and nothing else, so any other
// exception escapes to libFuzzer and counts as a finding, like a crash or a sanitizer report.
//
#ifndef CPC_TESTS_FUZZ_FUZZUTIL_H
#define CPC_TESTS_FUZZ_FUZZUTIL_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace cpc::fuzz {

/// A path named `name` in this process's own temporary directory (removed at exit).
inline std::string tempPath(const std::string &name) {
  static std::string dir = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/cpc-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      std::perror("cpc-fuzz: mkdtemp");
      std::abort();
    }
    static std::string removeAtExit = pattern;
    std::atexit([] { std::system(("rm -rf '" + removeAtExit + "'").c_str()); });
    return pattern;
  }();
  return dir + "/" + name;
}

/// Replaces the file at `path` with `size` bytes of `data`.
inline void writeFile(const std::string &path, const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("cpc-fuzz: cannot write " + path).c_str());
    std::abort();
  }
}

/// A finding that is neither a crash nor a sanitizer report (e.g. an importer that returned an
/// invalid module): print it and abort, so that libFuzzer saves the input.
[[noreturn]] inline void finding(const std::string &what) {
  std::fprintf(stderr, "cpc-fuzz: FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

} // namespace cpc::fuzz

#endif
