//===- NormalizationMathTest.cpp - the CUDA row kernels' arithmetic on the host ===//
//
// Runs softmax, LayerNorm and their gradients as the CUDA kernels decompose them (each of a row
// group's threads folds a strided share, partials combine in the shuffle tree's order, the
// per-element formulas of NormalizationMath.h; layer_norm_grad's chunked column sums) and
// compares with the CPU kernels on MAE-like shapes, rows of 1..3000 elements and axes that are
// not the last.
//
#include "kernels/cuda/NormalizationLaunch.h"
#include "kernels/cuda/NormalizationMath.h"
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

HostTensor randomTensor(DType t, std::vector<int64_t> shape, uint64_t seed, double lo, double hi) {
  HostTensor r(t, std::move(shape));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 12345;
  for (int64_t i = 0; i < r.numel(); ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    r.setValue(i, lo + (hi - lo) * double(x >> 11) * 0x1.0p-53);
  }
  return r;
}

/// f32 within 2e-6 relative (2e-7 absolute: a fifth of what the GPU tests allow, so that the
/// device's FMA contraction and expf's 2-ulp error fit), f64 within 1e-10 (1e-12), 16-bit floats
/// within a rounding step (both sides round an f32 value once, possibly to neighbouring values).
void expectClose(const HostTensor &cpu, const HostTensor &emulated, const std::string &what) {
  double rtol = 2e-6, atol = 2e-7;
  if (cpu.dtype == DType::F64)
    rtol = 1e-10, atol = 1e-12;
  else if (cpu.dtype == DType::BF16)
    rtol = 1.0 / 128, atol = 1e-6;
  else if (cpu.dtype == DType::F16)
    rtol = 1.0 / 1024, atol = 1e-6;
  int64_t bad = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    double w = cpu.value(i), h = emulated.value(i);
    bool ok = std::fabs(w - h) <= atol + rtol * std::fabs(w) || (std::isnan(w) && std::isnan(h)) || w == h;
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": cpu " << w << ", emulated " << h;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << cpu.numel() << " elements differ";
}

//===----------------------------------------------------------------------===//
// The kernels, emulated (Acc: float for f32 and 16-bit floats, double for f64).
//===----------------------------------------------------------------------===//

template <typename Acc> void emulateSoftmax(const HostTensor &x, HostTensor &y, int64_t axis) {
  RowShape s = rowShapeAlong(x.shape, axis);
  int tpr = rowGroupLaunch(s.rows, s.len).threadsPerRow;
  for (int64_t row = 0; row < s.rows; ++row) {
    int64_t base = rowBase(s, row);
    auto at = [&](int64_t j) { return Acc(x.value(base + j * s.inner)); };
    Acc negInf = -std::numeric_limits<Acc>::infinity();
    Acc m = emulateRowReduce<Acc>(s.len, tpr, MaxOp{}, negInf, at);
    Acc sum = emulateRowReduce<Acc>(s.len, tpr, SumOp{}, Acc(0), [&](int64_t j) { return expAcc(at(j) - m); });
    Acc inv = Acc(1) / sum;
    for (int64_t j = 0; j < s.len; ++j)
      y.setValue(base + j * s.inner, expAcc(at(j) - m) * inv);
  }
}

template <typename Acc> void emulateSoftmaxGrad(const HostTensor &y, const HostTensor &g, HostTensor &out, int64_t axis) {
  RowShape s = rowShapeAlong(y.shape, axis);
  int tpr = rowGroupLaunch(s.rows, s.len).threadsPerRow;
  for (int64_t row = 0; row < s.rows; ++row) {
    int64_t base = rowBase(s, row);
    auto yv = [&](int64_t j) { return Acc(y.value(base + j * s.inner)); };
    auto gv = [&](int64_t j) { return Acc(g.value(base + j * s.inner)); };
    Acc dot = emulateRowReduce<Acc>(s.len, tpr, SumOp{}, Acc(0), [&](int64_t j) { return gv(j) * yv(j); });
    for (int64_t j = 0; j < s.len; ++j)
      out.setValue(base + j * s.inner, softmaxGradValue(yv(j), gv(j), dot));
  }
}

/// A row's moments as rowMomentsOf computes them.
template <typename Acc> RowMoments<Acc> emulateMoments(const HostTensor &x, int64_t base, int64_t len, int tpr, double eps) {
  double sum = emulateRowReduce<double>(len, tpr, SumOp{}, 0.0, [&](int64_t j) { return double(Acc(x.value(base + j))); });
  RowMean<Acc> mean = rowMean<Acc>(sum, len);
  double squares = emulateRowReduce<double>(len, tpr, SumOp{}, 0.0, [&](int64_t j) {
    double d = wideDeviation(Acc(x.value(base + j)), mean);
    return d * d;
  });
  return rowMoments(mean, squares, len, eps);
}

template <typename Acc>
void emulateLayerNorm(const HostTensor &x, const HostTensor &scale, const HostTensor &bias, HostTensor &y, double eps) {
  int64_t len = scale.numel(), rows = x.numel() / len;
  int tpr = rowGroupLaunch(rows, len).threadsPerRow;
  for (int64_t row = 0; row < rows; ++row) {
    RowMoments<Acc> m = emulateMoments<Acc>(x, row * len, len, tpr, eps);
    for (int64_t j = 0; j < len; ++j)
      y.setValue(row * len + j, layerNormValue(Acc(x.value(row * len + j)), m, Acc(scale.value(j)), Acc(bias.value(j))));
  }
}

template <typename Acc>
void emulateLayerNormGrad(const HostTensor &x, const HostTensor &scale, const HostTensor &g, HostTensor &dx,
                          HostTensor &dscale, HostTensor &dbias, double eps) {
  int64_t len = scale.numel(), rows = x.numel() / len;
  int tpr = rowGroupLaunch(rows, len).threadsPerRow;
  // The row pass.
  std::vector<LayerNormGradRow<Acc>> stats(rows);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t base = row * len;
    RowMoments<Acc> m = emulateMoments<Acc>(x, base, len, tpr, eps);
    auto gs = [&](int64_t j) { return layerNormGradGs(Acc(g.value(base + j)), Acc(scale.value(j))); };
    double sumGs = emulateRowReduce<double>(len, tpr, SumOp{}, 0.0, gs);
    double sumGsXhat = emulateRowReduce<double>(len, tpr, SumOp{}, 0.0, [&](int64_t j) {
      return gs(j) * layerNormGradXhat(Acc(x.value(base + j)), m);
    });
    stats[row] = {m, sumGs / double(len), sumGsXhat / double(len)};
  }
  // The column pass over chunks of rows, then the chunks in order.
  ColumnChunkLaunch c = columnChunkLaunch(rows, len);
  std::vector<double> partials(2 * c.chunks * len, 0.0);
  for (int64_t chunk = 0; chunk < c.chunks; ++chunk)
    for (int64_t col = 0; col < len; ++col) {
      double sumScale = 0, sumBias = 0;
      for (int64_t row = chunk * c.chunkRows; row < std::min(rows, (chunk + 1) * c.chunkRows); ++row) {
        int64_t e = row * len + col;
        Acc xv = Acc(x.value(e)), gv = Acc(g.value(e));
        sumScale += layerNormGradScaleTerm(xv, gv, stats[row]);
        sumBias += double(gv);
        dx.setValue(e, layerNormGradInput(xv, gv, Acc(scale.value(col)), stats[row]));
      }
      partials[chunk * len + col] = sumScale;
      partials[(c.chunks + chunk) * len + col] = sumBias;
    }
  for (int64_t col = 0; col < len; ++col) {
    double s = 0, b = 0;
    for (int64_t k = 0; k < c.chunks; ++k) {
      s += partials[k * len + col];
      b += partials[(c.chunks + k) * len + col];
    }
    dscale.setValue(col, Acc(s));
    dbias.setValue(col, Acc(b));
  }
}

/// Calls f.template operator()<Acc>() with the kernels' accumulation type of `t`.
template <typename F> void withAcc(DType t, F &&f) {
  if (t == DType::F64)
    f(double{});
  else
    f(float{});
}

//===----------------------------------------------------------------------===//
// The comparisons.
//===----------------------------------------------------------------------===//

void checkSoftmax(DType t, std::vector<int64_t> shape, int64_t axis, uint64_t seed, double lo = -8, double hi = 8) {
  HostTensor x = randomTensor(t, shape, seed, lo, hi), cpu(t, shape), emu(t, shape);
  runCpuKernel(OpKind::Softmax, {&x}, {&cpu}, {{"axis", axis}});
  withAcc(t, [&](auto acc) { emulateSoftmax<decltype(acc)>(x, emu, axis); });
  expectClose(cpu, emu, "softmax " + std::string(dtypeName(t)) + shapeString(shape) + " axis " + std::to_string(axis));

  HostTensor g = randomTensor(t, shape, seed + 7, -1, 1), gradCpu(t, shape), gradEmu(t, shape);
  runCpuKernel(OpKind::SoftmaxGrad, {&cpu, &g}, {&gradCpu}, {{"axis", axis - (int64_t)shape.size()}}); // a negative axis
  withAcc(t, [&](auto acc) { emulateSoftmaxGrad<decltype(acc)>(cpu, g, gradEmu, axis); });
  expectClose(gradCpu, gradEmu, "softmax_grad " + std::string(dtypeName(t)) + shapeString(shape));
}

void checkLayerNorm(DType t, std::vector<int64_t> shape, int64_t axis, uint64_t seed, double mean = 0,
                    double spread = 2) {
  std::vector<int64_t> normalized(shape.begin() + axis, shape.end());
  HostTensor x = randomTensor(t, shape, seed, mean - spread, mean + spread);
  HostTensor scale = randomTensor(t, normalized, seed + 1, 0.5, 1.5), bias = randomTensor(t, normalized, seed + 2, -1, 1);
  HostTensor cpu(t, shape), emu(t, shape);
  double eps = 1e-5;
  nlohmann::json attrs = {{"axis", axis}, {"epsilon", eps}};
  runCpuKernel(OpKind::LayerNorm, {&x, &scale, &bias}, {&cpu}, attrs);
  withAcc(t, [&](auto acc) { emulateLayerNorm<decltype(acc)>(x, scale, bias, emu, eps); });
  std::string what = std::string(dtypeName(t)) + shapeString(shape) + " mean " + std::to_string(mean);
  expectClose(cpu, emu, "layer_norm " + what);

  HostTensor g = randomTensor(t, shape, seed + 3, -1, 1);
  HostTensor dx(t, shape), dscale(t, normalized), dbias(t, normalized);
  HostTensor dxEmu(t, shape), dscaleEmu(t, normalized), dbiasEmu(t, normalized);
  runCpuKernel(OpKind::LayerNormGrad, {&x, &scale, &g}, {&dx, &dscale, &dbias}, attrs);
  withAcc(t, [&](auto acc) { emulateLayerNormGrad<decltype(acc)>(x, scale, g, dxEmu, dscaleEmu, dbiasEmu, eps); });
  expectClose(dx, dxEmu, "layer_norm_grad input " + what);
  expectClose(dscale, dscaleEmu, "layer_norm_grad scale " + what);
  expectClose(dbias, dbiasEmu, "layer_norm_grad bias " + what);
}

const std::vector<int64_t> kRowLengths = {1, 2, 3, 31, 32, 33, 100, 192, 511, 1000, 1024, 1025, 1537, 2048, 2049, 3000};

} // namespace

TEST(NormalizationMath, RowGroupLaunchCoversEveryRow) {
  for (int64_t rows : {1, 7, 8, 9, 400, 100000})
    for (int64_t len : kRowLengths) {
      RowGroupLaunch l = rowGroupLaunch(rows, len);
      EXPECT_GE(l.blocks * l.rowsPerBlock, rows);
      EXPECT_LE(l.threads, kMaxThreadsPerBlock);
      EXPECT_EQ(l.threadsPerRow % kWarpSize, 0);
      EXPECT_EQ(l.threads, l.threadsPerRow * l.rowsPerBlock);
      EXPECT_EQ(l.threadsPerRow & (l.threadsPerRow - 1), 0) << "a power of two";
      EXPECT_TRUE(l.rowsPerBlock == 1 || l.threadsPerRow == kWarpSize) << "block-wide groups hold one row";
      if (len > kWarpRowMax) {
        EXPECT_GE((int64_t)l.threadsPerRow * 4, std::min<int64_t>(len, 4 * kMaxThreadsPerBlock));
      }
    }
}

TEST(NormalizationMath, ColumnChunksCoverEveryRowOnce) {
  for (int64_t rows : {0, 1, 15, 16, 17, 400, 8191, 8192, 8193, 1000000})
    for (int64_t cols : {1, 31, 192, 768, 5000}) {
      ColumnChunkLaunch c = columnChunkLaunch(rows, cols);
      EXPECT_GE(c.chunks * c.chunkRows, rows);
      EXPECT_LT((c.chunks - 1) * c.chunkRows, std::max<int64_t>(rows, 1)) << "no empty chunk but a lone one";
      EXPECT_LE(c.chunks, kMaxChunks);
      EXPECT_GE(c.columnBlocks * c.columnsPerBlock, cols);
      EXPECT_LE(c.columnsPerBlock, kMaxThreadsPerBlock);
    }
}

TEST(NormalizationMath, GroupReduceFollowsTheButterfly) {
  // 2^24 absorbs a lone 1 (ulp 2) but not the pairs, fours, ... it meets later: lane 0 meets
  // lane 16 (1, lost), then lanes 8 (2), 4 (4), 2 (8) and 1 (16) holding partial sums.
  std::vector<float> p(32, 1.0f);
  p[0] = 0x1p24f;
  EXPECT_EQ(rowGroupReduce(p, SumOp{}, 0.0f), 0x1p24f + 30);
  // Two warps: each folds, then the warp results meet (with zeros for the absent warps).
  std::vector<float> two(64, 1.0f);
  two[0] = 0x1p24f;
  EXPECT_EQ(rowGroupReduce(two, SumOp{}, 0.0f), 0x1p24f + 30 + 32);
  std::vector<float> m(256, -1.0f);
  m[77] = 5.0f;
  m[3] = std::nanf("");
  EXPECT_EQ(rowGroupReduce(m, MaxOp{}, -INFINITY), 5.0f) << "NaN does not replace a maximum";
}

TEST(NormalizationMath, SoftmaxMatchesCpuOnMaeShapes) {
  checkSoftmax(DType::F32, {8 * 50, 192}, 1, 1);
  checkSoftmax(DType::F32, {8 * 17, 128}, 1, 2);
  checkSoftmax(DType::F32, {2, 3, 50, 50}, 3, 3); // attention scores
}

TEST(NormalizationMath, SoftmaxMatchesCpuOnRowsOfEveryLength) {
  for (int64_t len : kRowLengths)
    checkSoftmax(DType::F32, {3, len}, 1, 10 + len, -30, 30);
}

TEST(NormalizationMath, SoftmaxMatchesCpuAlongAnAxisThatIsNotLast) {
  checkSoftmax(DType::F32, {4, 37, 6}, 1, 4);
  checkSoftmax(DType::F32, {50, 7}, 0, 5);
  checkSoftmax(DType::F32, {2, 1500, 3}, 1, 6); // block-wide strided rows
}

TEST(NormalizationMath, SoftmaxMatchesCpuOnOtherFloatTypes) {
  checkSoftmax(DType::F64, {8 * 17, 128}, 1, 7);
  checkSoftmax(DType::F64, {3, 2000}, 1, 8);
  checkSoftmax(DType::F16, {8 * 17, 128}, 1, 9);
  checkSoftmax(DType::BF16, {4, 37, 6}, 1, 10);
}

TEST(NormalizationMath, SoftmaxKeepsNanAndMaskedRows) {
  HostTensor x = randomTensor(DType::F32, {3, 40}, 11, -4, 4), cpu(DType::F32, {3, 40}), emu(DType::F32, {3, 40});
  reinterpret_cast<float *>(x.data())[5] = std::nanf("");        // row 0: NaN everywhere
  for (int j = 0; j < 30; ++j)
    reinterpret_cast<float *>(x.data())[40 + j] = -INFINITY; // row 1: masked positions
  runCpuKernel(OpKind::Softmax, {&x}, {&cpu}, {{"axis", 1}});
  emulateSoftmax<float>(x, emu, 1);
  expectClose(cpu, emu, "softmax with NaN and -inf");
  EXPECT_TRUE(std::isnan(emu.value(0)));
  EXPECT_EQ(emu.value(40), 0.0);
}

TEST(NormalizationMath, LayerNormMatchesCpuOnMaeShapes) {
  checkLayerNorm(DType::F32, {8, 50, 192}, 2, 21);
  checkLayerNorm(DType::F32, {8 * 17, 128}, 1, 22);
  checkLayerNorm(DType::F32, {8 * 50, 192}, 1, 23, /*mean=*/1000, /*spread=*/3); // |mean| >> stddev
  checkLayerNorm(DType::F32, {4, 6, 8}, 1, 24); // normalized over the last two dims
}

TEST(NormalizationMath, LayerNormMatchesCpuOnRowsOfEveryLength) {
  for (int64_t len : kRowLengths)
    checkLayerNorm(DType::F32, {3, len}, 1, 30 + len, 0.5, 4);
}

// Rows of one to three elements: the input gradient's three terms cancel (exactly for one and
// two), so terms rounded to f32 leave residues that rstd magnifies (seen on an H200); in f64,
// as the CPU computes them, nothing is left but the final rounding.
TEST(NormalizationMath, LayerNormGradOfShortRowsCancelsAsOnTheCpu) {
  for (int64_t len : {1, 2, 3})
    for (uint64_t seed = 0; seed < 40; ++seed)
      checkLayerNorm(DType::F32, {3, len}, 1, 1000 + seed, 0.5, 4);
}

TEST(NormalizationMath, LayerNormMatchesCpuOnOtherFloatTypes) {
  checkLayerNorm(DType::F64, {8 * 17, 128}, 1, 41, 100, 3);
  checkLayerNorm(DType::F64, {5, 3000}, 1, 42);
  checkLayerNorm(DType::F16, {8 * 17, 128}, 1, 43);
  checkLayerNorm(DType::BF16, {8 * 50, 192}, 1, 44);
}
