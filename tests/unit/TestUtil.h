//===- TestUtil.h - what unit, CUDA-host and GPU tests share: values, errors -===//
#ifndef CPC_TESTS_UNIT_TESTUTIL_H
#define CPC_TESTS_UNIT_TESTUTIL_H

#include "kernels/Tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace cpc::test {

/// n values drawn uniformly from [lo, hi) (std::mt19937 seeded with `seed`, drawn as T).
template <class T> std::vector<T> uniformValues(int64_t n, unsigned seed, T lo = T(-1), T hi = T(1)) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<T> d(lo, hi);
  std::vector<T> v(n);
  for (T &x : v)
    x = d(gen);
  return v;
}

/// Floats from [lo, hi): uniformValues<float>, what most kernel tests draw.
inline std::vector<float> randomFloats(int64_t n, unsigned seed, float lo = -1.f, float hi = 1.f) {
  return uniformValues<float>(n, seed, lo, hi);
}

/// `fn` throws a RuntimeError whose message has every one of `parts`.
template <typename F> void expectError(F fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const RuntimeError &e) {
    for (const auto &p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "'" << e.what() << "' lacks '" << p << "'";
  }
}

/// The message of the RuntimeError `fn` throws, or "" when it throws none.
template <typename Fn> std::string errorOf(Fn fn) {
  try {
    fn();
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

} // namespace cpc::test

#endif
