//===- AdamWMathTest.cpp - the AdamW CUDA kernel's arithmetic, on the host ===//
//
// Runs AdamWMath.h's constants and per-element update (what kernels/cuda/Optimizer.cu runs per
// element, with separately rounded operations) over whole tensors and compares with the CPU
// kernel (kernels/cpu/Optimizer.cpp) bit for bit: f32 and f64, both forms of torch's lerp, with
// and without weight decay, early and late steps; f16/bf16 through f32 as the CPU widens them.
//
#include "kernels/Float16.h"
#include "kernels/cpu/Kernel.h"
#include "kernels/cuda/AdamWMath.h"
#include "kernels/cuda/MultiTensorLaunch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;

namespace {

struct Setting {
  double lr, step, beta1, beta2, eps, wd;
};

const std::vector<Setting> kSettings = {
    {1e-3, 1, 0.9, 0.999, 1e-8, 0.01},   // first step: large bias corrections
    {3e-4, 17, 0.9, 0.95, 1e-6, 0.1},
    {1e-2, 1000, 0.9, 0.999, 1e-8, 0},   // no decay
    {5e-3, 3, 0.3, 0.99, 1e-5, 0.05},    // 1 - beta1 >= 0.5: lerp from the end
    {1e-3, 250000, 0.8, 0.9999, 1e-8, 0.02},
};

template <class T> std::vector<T> valuesOf(size_t n, unsigned seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<T> v(n);
  for (T &x : v)
    x = T(d(gen));
  return v;
}

/// Runs the CPU kernel on params/grads/moments stored as `dtype` (bytes), lr and step as f32.
void runCpu(DType dtype, const std::vector<int64_t> &shape, std::vector<std::vector<uint8_t>> &tensors,
            std::vector<std::vector<uint8_t>> &outs, const Setting &s) {
  float lr = float(s.lr), step = float(s.step);
  KernelContext ctx;
  ctx.op = OpKind::AdamW;
  for (auto &t : tensors)
    ctx.inputs.push_back(TensorRef{t.data(), dtype, shape});
  ctx.inputs.push_back(TensorRef{&lr, DType::F32, {}});
  ctx.inputs.push_back(TensorRef{&step, DType::F32, {}});
  for (auto &t : outs)
    ctx.outputs.push_back(TensorRef{t.data(), dtype, shape});
  ctx.setAttrs({{"beta1", s.beta1}, {"beta2", s.beta2}, {"epsilon", s.eps}, {"weight_decay", s.wd}});
  ctx.threads = 2;
  KernelRegistry::cpu().find(OpKind::AdamW)(ctx);
}

template <class T> std::vector<uint8_t> bytesOf(const std::vector<T> &v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Tests f32 and f64 bit for bit: every output of every element equals the CPU kernel's.
template <class T> void checkExact(DType dtype) {
  const std::vector<int64_t> shape = {37, 29};
  const size_t n = 37 * 29;
  for (const Setting &s : kSettings) {
    std::vector<T> p = valuesOf<T>(n, 1, -1, 1), g = valuesOf<T>(n, 2, -0.1, 0.1), m = valuesOf<T>(n, 3, -0.05, 0.05),
                   v = valuesOf<T>(n, 4, 0, 1e-3);
    std::vector<std::vector<uint8_t>> ins = {bytesOf(p), bytesOf(g), bytesOf(m), bytesOf(v)};
    std::vector<std::vector<uint8_t>> outs(3, std::vector<uint8_t>(n * sizeof(T)));
    runCpu(dtype, shape, ins, outs, s);
    AdamWScalars<T> k = adamwScalars<T>({s.beta1, s.beta2, s.eps, s.wd}, double(float(s.lr)), double(float(s.step)));
    std::vector<T> want[3];
    for (int o = 0; o < 3; ++o) {
      want[o].resize(n);
      std::memcpy(want[o].data(), outs[o].data(), outs[o].size());
    }
    int bad = 0;
    for (size_t i = 0; i < n; ++i) {
      T pi = p[i], mi = m[i], vi = v[i];
      adamwUpdate(k, pi, g[i], mi, vi);
      bool same = std::memcmp(&pi, &want[0][i], sizeof(T)) == 0 && std::memcmp(&mi, &want[1][i], sizeof(T)) == 0 &&
                  std::memcmp(&vi, &want[2][i], sizeof(T)) == 0;
      if (!same && bad++ < 5)
        ADD_FAILURE() << dtypeName(dtype) << " step " << s.step << " element " << i << ": cpu (" << want[0][i] << ", "
                      << want[1][i] << ", " << want[2][i] << "), emulated (" << pi << ", " << mi << ", " << vi << ")";
    }
    EXPECT_EQ(bad, 0) << dtypeName(dtype) << " step " << s.step;
  }
}

TEST(AdamWMath, F32MatchesCpuKernelBitForBit) { checkExact<float>(DType::F32); }
TEST(AdamWMath, F64MatchesCpuKernelBitForBit) { checkExact<double>(DType::F64); }

// Tests f16 and bf16 parameters: loaded as f32, updated in f32, rounded once, as the CPU
// kernel's widening does: bit for bit.
TEST(AdamWMath, SixteenBitParamsComputeInF32) {
  const std::vector<int64_t> shape = {513};
  for (DType dtype : {DType::F16, DType::BF16})
    for (const Setting &s : kSettings) {
      std::vector<std::vector<float>> f = {valuesOf<float>(513, 5, -1, 1), valuesOf<float>(513, 6, -0.1, 0.1),
                                           valuesOf<float>(513, 7, -0.05, 0.05), valuesOf<float>(513, 8, 0, 1e-3)};
      std::vector<std::vector<uint16_t>> h(4, std::vector<uint16_t>(513));
      std::vector<std::vector<uint8_t>> ins;
      for (int k = 0; k < 4; ++k) {
        for (size_t i = 0; i < 513; ++i)
          h[k][i] = store16(dtype, f[k][i]);
        ins.push_back(bytesOf(h[k]));
      }
      std::vector<std::vector<uint8_t>> outs(3, std::vector<uint8_t>(513 * 2));
      runCpu(dtype, shape, ins, outs, s);
      AdamWScalars<float> k = adamwScalars<float>({s.beta1, s.beta2, s.eps, s.wd}, double(float(s.lr)), double(float(s.step)));
      int bad = 0;
      for (size_t i = 0; i < 513; ++i) {
        float p = load16(dtype, h[0][i]), g = load16(dtype, h[1][i]), m = load16(dtype, h[2][i]), v = load16(dtype, h[3][i]);
        adamwUpdate(k, p, g, m, v);
        uint16_t got[3] = {store16(dtype, p), store16(dtype, m), store16(dtype, v)};
        for (int o = 0; o < 3; ++o) {
          uint16_t want;
          std::memcpy(&want, outs[o].data() + 2 * i, 2);
          if (want != got[o] && bad++ < 5)
            ADD_FAILURE() << dtypeName(dtype) << " output " << o << " element " << i;
        }
      }
      EXPECT_EQ(bad, 0) << dtypeName(dtype) << " step " << s.step;
    }
}

// Tests the constants: the bias corrections and the lerp form chosen by |1 - beta1|.
TEST(AdamWMath, ScalarsFollowTorch) {
  AdamWScalars<double> s = adamwScalars<double>({0.9, 0.999, 1e-8, 0.01}, 1e-3, 1);
  EXPECT_DOUBLE_EQ(s.negStepSize, -1e-3 / (1 - 0.9));
  EXPECT_DOUBLE_EQ(s.bc2Sqrt, std::sqrt(1 - 0.999));
  EXPECT_DOUBLE_EQ(s.decay, 1 - 1e-3 * 0.01);
  EXPECT_TRUE(s.smallWeight);
  EXPECT_FALSE(adamwScalars<float>({0.3, 0.999, 1e-8, 0}, 1e-3, 5).smallWeight);
}

} // namespace

namespace {

// Tests the multi-tensor launches: every element of every tensor is covered by exactly one
// (block, thread) of exactly one launch, as the kernel maps them (tensorOfBlock, then
// kElementsPerBlock elements a block, strided by the block's threads); empty tensors get no
// blocks; no launch holds more than kTensorsPerLaunch tensors.
TEST(MultiTensorLaunch, CoversEveryElementOnce) {
  std::vector<int64_t> sizes = {0, 1, kElementsPerBlock, kElementsPerBlock + 1, 5000, 0, 3};
  for (int i = 0; i < 60; ++i)
    sizes.push_back((i * 7919) % 3001);
  std::vector<std::vector<int>> seen(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i)
    seen[i].assign(sizes[i], 0);
  for (const MultiTensorChunk &c : multiTensorChunks(sizes)) {
    ASSERT_LE(c.count, kTensorsPerLaunch);
    for (int64_t block = 0; block < c.blocks(); ++block) {
      int t = tensorOfBlock(c.blockStart, c.count, block);
      int64_t n = sizes[c.first + t], begin = (block - c.blockStart[t]) * kElementsPerBlock;
      int64_t end = std::min(begin + kElementsPerBlock, n);
      ASSERT_LT(begin, n) << "a block past its tensor's end";
      for (int thread = 0; thread < kMultiTensorThreads; ++thread)
        for (int64_t i = begin + thread; i < end; i += kMultiTensorThreads)
          ++seen[c.first + t][i];
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    for (int64_t e = 0; e < sizes[i]; ++e)
      ASSERT_EQ(seen[i][e], 1) << "tensor " << i << " element " << e;
}

} // namespace
