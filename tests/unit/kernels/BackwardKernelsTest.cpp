//===- BackwardKernelsTest.cpp - pad and the fused VJP kernels -------------===//
//
// Each gradient kernel is checked against central finite differences of a forward written
// here in double (L = sum(forward(x) * G) for a random upstream gradient G), the conv grads
// also against direct loops, and pad against an explicit placement.
//
#include "kernels/cpu/Kernel.h"
#include "tests/unit/TestUtil.h"
#include "tests/unit/kernels/KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

using namespace cpc;
using namespace cpc::kernels;
using cpc::test::randomFloats;

namespace {

using cpc::kernels::testing::ref;

void run(OpKind op, std::vector<TensorRef> ins, std::vector<TensorRef> outs, nlohmann::json attrs,
         int threads = 1) {
  cpc::kernels::testing::run(op, std::move(ins), std::move(outs), attrs, threads);
}

std::vector<double> toDouble(const std::vector<float> &v) { return {v.begin(), v.end()}; }

/// Central differences of a scalar function of x, in double.
std::vector<double> numericGrad(const std::function<double(const std::vector<double> &)> &f,
                                std::vector<double> x, double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + h;
    double up = f(x);
    x[i] = keep - h;
    double down = f(x);
    x[i] = keep;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

double dot(const std::vector<double> &a, const std::vector<float> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * b[i];
  return s;
}

template <typename T>
void expectClose(const std::vector<T> &got, const std::vector<double> &want, double rtol = 1e-3,
                 double atol = 1e-4) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(double(got[i]), want[i], atol + rtol * std::abs(want[i])) << "element " << i;
}

// Forward references in double.
double geluRef(double x, bool tanhMode) {
  if (tanhMode)
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

std::vector<double> softmaxRef(const std::vector<double> &x, int64_t outer, int64_t len, int64_t inner) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < len; ++j)
        m = std::max(m, x[(o * len + j) * inner + i]);
      for (int64_t j = 0; j < len; ++j)
        s += std::exp(x[(o * len + j) * inner + i] - m);
      for (int64_t j = 0; j < len; ++j)
        y[(o * len + j) * inner + i] = std::exp(x[(o * len + j) * inner + i] - m) / s;
    }
  return y;
}

std::vector<double> layerNormRef(const std::vector<double> &x, const std::vector<double> &s,
                                 const std::vector<double> &b, int64_t n, double eps) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j)
      mean += x[r * n + j] / n;
    for (int64_t j = 0; j < n; ++j)
      var += (x[r * n + j] - mean) * (x[r * n + j] - mean) / n;
    for (int64_t j = 0; j < n; ++j)
      y[r * n + j] = (x[r * n + j] - mean) / std::sqrt(var + eps) * s[j] + b[j];
  }
  return y;
}

} // namespace

//===----------------------------------------------------------------------===//
// pad
//===----------------------------------------------------------------------===//

TEST(BackwardKernels, PadLowHighInteriorI32) {
  // [2,3] -> low {1,0}, high {0,2}, interior {1,2}: dims 1+0+2+1 = 4 and 0+2+3+4 = 9.
  std::vector<int32_t> in = {1, 2, 3, 4, 5, 6}, out(4 * 9, -99);
  run(OpKind::Pad, {ref(in, {2, 3}, DType::I32)}, {ref(out, {4, 9}, DType::I32)},
      {{"low_padding", {1, 0}}, {"high_padding", {0, 2}}, {"interior_padding", {1, 2}}, {"value", 7.0}});
  std::vector<int32_t> want(4 * 9, 7);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      want[(1 + i * 2) * 9 + j * 3] = in[i * 3 + j];
  EXPECT_EQ(out, want);
}

TEST(BackwardKernels, PadF32ZeroIsStridedSliceVjp) {
  // slice of [3,7] with starts {1,0}, strides {1,3} picks rows 1..2, cols 0,3,6 -> [2,3].
  // Its VJP pads the [2,3] gradient with low {1,0}, interior {0,2}, high {0,0}.
  auto g = randomFloats(6, 1);
  std::vector<float> out(21, 123.f);
  run(OpKind::Pad, {ref(g, {2, 3})}, {ref(out, {3, 7})},
      {{"low_padding", {1, 0}}, {"high_padding", {0, 0}}, {"interior_padding", {0, 2}}});
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 7; ++c) {
      float want = (r >= 1 && c % 3 == 0) ? g[(r - 1) * 3 + c / 3] : 0.f;
      EXPECT_EQ(out[r * 7 + c], want) << r << "," << c;
    }
}

TEST(BackwardKernels, PadOtherElementTypes) {
  std::vector<uint16_t> h = {0x1111, 0x2222}, ho(5);
  run(OpKind::Pad, {ref(h, {2}, DType::F16)}, {ref(ho, {5}, DType::F16)},
      {{"low_padding", {1}}, {"high_padding", {1}}, {"interior_padding", {1}}, {"value", 1.0}});
  EXPECT_EQ(ho, (std::vector<uint16_t>{0x3C00, 0x1111, 0x3C00, 0x2222, 0x3C00}));
  run(OpKind::Pad, {ref(h, {2}, DType::BF16)}, {ref(ho, {5}, DType::BF16)},
      {{"low_padding", {0}}, {"high_padding", {3}}, {"interior_padding", {0}}, {"value", -2.0}});
  EXPECT_EQ(ho, (std::vector<uint16_t>{0x1111, 0x2222, 0xC000, 0xC000, 0xC000}));

  std::vector<uint8_t> b = {1, 0, 1}, bo(4);
  run(OpKind::Pad, {ref(b, {3}, DType::I1)}, {ref(bo, {4}, DType::I1)},
      {{"low_padding", {0}}, {"high_padding", {1}}, {"interior_padding", {0}}, {"value", 1.0}});
  EXPECT_EQ(bo, (std::vector<uint8_t>{1, 0, 1, 1}));

  std::vector<int8_t> i8 = {5}, i8o(3);
  run(OpKind::Pad, {ref(i8, {1}, DType::I8)}, {ref(i8o, {3}, DType::I8)},
      {{"low_padding", {1}}, {"high_padding", {1}}, {"interior_padding", {0}}, {"value", -1e300}}); // saturates
  EXPECT_EQ(i8o, (std::vector<int8_t>{-128, 5, -128}));

  std::vector<double> d = {2.5}, dout(1);
  run(OpKind::Pad, {ref(d, {}, DType::F64)}, {ref(dout, {}, DType::F64)},
      {{"low_padding", nlohmann::json::array()}, {"high_padding", nlohmann::json::array()}, {"interior_padding", nlohmann::json::array()}});
  EXPECT_EQ(dout[0], 2.5);

  // A 3-d pad large enough to take the parallel path, against a direct placement.
  std::vector<int64_t> big(20 * 30 * 40), bigOut(22 * 61 * 43);
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = int64_t(i);
  run(OpKind::Pad, {ref(big, {20, 30, 40}, DType::I64)}, {ref(bigOut, {22, 61, 43}, DType::I64)},
      {{"low_padding", {2, 0, 1}}, {"high_padding", {0, 2, 2}}, {"interior_padding", {0, 1, 0}}, {"value", -1.0}}, 4);
  std::vector<int64_t> want(bigOut.size(), -1);
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 30; ++j)
      for (int k = 0; k < 40; ++k)
        want[((2 + i) * 61 + 2 * j) * 43 + 1 + k] = big[(i * 30 + j) * 40 + k];
  EXPECT_EQ(bigOut, want);

  std::vector<float> x(6), bad(8);
  EXPECT_THROW(run(OpKind::Pad, {ref(x, {2, 3})}, {ref(bad, {2, 4})},
                   {{"low_padding", {0, 0}}, {"high_padding", {0, 0}}, {"interior_padding", {0, 0}}}),
               RuntimeError);
}

//===----------------------------------------------------------------------===//
// gelu_grad, softmax_grad, layer_norm_grad
//===----------------------------------------------------------------------===//

TEST(BackwardKernels, GeluGradMatchesFiniteDifferences) {
  for (const char *mode : {"none", "tanh"}) {
    bool tanhMode = std::string(mode) == "tanh";
    auto x = randomFloats(64, 2, -4.f, 4.f), g = randomFloats(64, 3);
    std::vector<float> dx(64);
    run(OpKind::GeluGrad, {ref(x, {8, 8}), ref(g, {8, 8})}, {ref(dx, {8, 8})}, {{"approximate", mode}});
    auto want = numericGrad(
        [&](const std::vector<double> &xd) {
          double s = 0;
          for (size_t i = 0; i < xd.size(); ++i)
            s += geluRef(xd[i], tanhMode) * g[i];
          return s;
        },
        toDouble(x));
    expectClose(dx, want);

    // f64, in place on the grad.
    std::vector<double> xd(x.begin(), x.end()), gd(g.begin(), g.end());
    run(OpKind::GeluGrad, {ref(xd, {64}, DType::F64), ref(gd, {64}, DType::F64)}, {ref(gd, {64}, DType::F64)},
        {{"approximate", mode}});
    expectClose(gd, want, 1e-7, 1e-8);
  }
  std::vector<float> x(2), dx(2);
  EXPECT_THROW(run(OpKind::GeluGrad, {ref(x, {2}), ref(x, {2})}, {ref(dx, {2})}, {{"approximate", "fast"}}),
               RuntimeError);
}

TEST(BackwardKernels, SoftmaxGradMatchesFiniteDifferences) {
  const std::vector<int64_t> shape = {2, 5, 3};
  for (int64_t axis : {0, 1, 2}) {
    int64_t outer = 1, inner = 1, len = shape[axis];
    for (int64_t d = 0; d < axis; ++d)
      outer *= shape[d];
    for (int64_t d = axis + 1; d < 3; ++d)
      inner *= shape[d];
    auto x = randomFloats(30, 4 + axis, -2.f, 2.f), G = randomFloats(30, 10 + axis);
    auto yd = softmaxRef(toDouble(x), outer, len, inner);
    std::vector<float> y(yd.begin(), yd.end()), dx(30);
    run(OpKind::SoftmaxGrad, {ref(y, shape), ref(G, shape)}, {ref(dx, shape)}, {{"axis", axis}});
    auto want = numericGrad([&](const std::vector<double> &xd) { return dot(softmaxRef(xd, outer, len, inner), G); },
                            toDouble(x));
    expectClose(dx, want);
    // In place over the grad gives the same values.
    std::vector<float> g2 = G;
    run(OpKind::SoftmaxGrad, {ref(y, shape), ref(g2, shape)}, {ref(g2, shape)}, {{"axis", axis}});
    EXPECT_EQ(g2, dx);
  }
}

TEST(BackwardKernels, LayerNormGradMatchesFiniteDifferences) {
  // [3,2,4] normalized over axis 1 (8 elements), scale/bias [2,4].
  const int64_t rows = 3, n = 8;
  const double eps = 1e-5;
  auto x = randomFloats(rows * n, 20, -2.f, 3.f), s = randomFloats(n, 21, 0.5f, 1.5f), b = randomFloats(n, 22),
       G = randomFloats(rows * n, 23);
  std::vector<float> dx(rows * n), ds(n), db(n);
  run(OpKind::LayerNormGrad, {ref(x, {3, 2, 4}), ref(s, {2, 4}), ref(G, {3, 2, 4})},
      {ref(dx, {3, 2, 4}), ref(ds, {2, 4}), ref(db, {2, 4})}, {{"axis", 1}, {"epsilon", eps}});
  auto xd = toDouble(x), sd = toDouble(s), bd = toDouble(b);
  expectClose(dx, numericGrad([&](const std::vector<double> &v) { return dot(layerNormRef(v, sd, bd, n, eps), G); },
                              xd));
  expectClose(ds, numericGrad([&](const std::vector<double> &v) { return dot(layerNormRef(xd, v, bd, n, eps), G); },
                              sd));
  expectClose(db, numericGrad([&](const std::vector<double> &v) { return dot(layerNormRef(xd, sd, v, n, eps), G); },
                              bd));
}

TEST(BackwardKernels, LayerNormGradIsDeterministicAndAliasSafe) {
  const int64_t rows = 3000, n = 24;
  auto x = randomFloats(rows * n, 30, -1.f, 5.f), s = randomFloats(n, 31), G = randomFloats(rows * n, 32);
  nlohmann::json attrs = {{"axis", 1}, {"epsilon", 1e-5}};
  std::vector<float> dx1(rows * n), ds1(n), db1(n), dx4(rows * n), ds4(n), db4(n);
  run(OpKind::LayerNormGrad, {ref(x, {rows, n}), ref(s, {n}), ref(G, {rows, n})},
      {ref(dx1, {rows, n}), ref(ds1, {n}), ref(db1, {n})}, attrs, 1);
  run(OpKind::LayerNormGrad, {ref(x, {rows, n}), ref(s, {n}), ref(G, {rows, n})},
      {ref(dx4, {rows, n}), ref(ds4, {n}), ref(db4, {n})}, attrs, 4);
  EXPECT_EQ(dx1, dx4);
  EXPECT_EQ(ds1, ds4);
  EXPECT_EQ(db1, db4);
  // dbias is the column sum of G.
  for (int64_t j = 0; j < n; ++j) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      sum += G[r * n + j];
    EXPECT_NEAR(db1[j], sum, 1e-3);
  }
  // input_grad written over grad, then over input.
  std::vector<float> g2 = G, x2 = x;
  run(OpKind::LayerNormGrad, {ref(x, {rows, n}), ref(s, {n}), ref(g2, {rows, n})},
      {ref(g2, {rows, n}), ref(ds4, {n}), ref(db4, {n})}, attrs, 4);
  EXPECT_EQ(g2, dx1);
  run(OpKind::LayerNormGrad, {ref(x2, {rows, n}), ref(s, {n}), ref(G, {rows, n})},
      {ref(x2, {rows, n}), ref(ds4, {n}), ref(db4, {n})}, attrs, 2);
  EXPECT_EQ(x2, dx1);
  EXPECT_EQ(ds4, ds1);
}

//===----------------------------------------------------------------------===//
// gather_grad, gather_elements_grad
//===----------------------------------------------------------------------===//

TEST(BackwardKernels, GatherGradAccumulatesDuplicates) {
  // data [3,5,2], gather axis 1 with indices [2,3] (duplicates and a negative) -> [3,2,3,2].
  std::vector<int64_t> idx = {4, 1, 4, -1, 0, 1};
  auto G = randomFloats(3 * 6 * 2, 40);
  std::vector<float> dd(3 * 5 * 2);
  run(OpKind::GatherGrad, {ref(G, {3, 2, 3, 2}), ref(idx, {2, 3}, DType::I64)}, {ref(dd, {3, 5, 2})},
      {{"axis", 1}, {"dim_size", 5}});
  auto gatherRef = [&](const std::vector<double> &data) {
    double s = 0;
    for (int o = 0; o < 3; ++o)
      for (int i = 0; i < 6; ++i)
        for (int k = 0; k < 2; ++k) {
          int64_t j = idx[i] < 0 ? idx[i] + 5 : idx[i];
          s += data[(o * 5 + j) * 2 + k] * G[(o * 6 + i) * 2 + k];
        }
    return s;
  };
  expectClose(dd, numericGrad(gatherRef, std::vector<double>(30, 0.5)), 1e-6, 1e-6);
  // Row 4 of the axis is taken three times (4, 4, -1), row 2 never.
  for (int k = 0; k < 2; ++k) {
    EXPECT_FLOAT_EQ(dd[(0 * 5 + 4) * 2 + k], G[0 * 2 + k] + G[2 * 2 + k] + G[3 * 2 + k]);
    EXPECT_EQ(dd[(1 * 5 + 2) * 2 + k], 0.f);
  }

  // Embedding-style: axis 0, i32 indices, many duplicates, parallel path vs serial.
  const int64_t V = 50, D = 96, T = 600;
  std::vector<int32_t> tok(T);
  for (int64_t t = 0; t < T; ++t)
    tok[t] = int32_t((t * 7) % 13);
  auto Ge = randomFloats(T * D, 41);
  std::vector<float> e1(V * D), e4(V * D);
  run(OpKind::GatherGrad, {ref(Ge, {T, D}), ref(tok, {T}, DType::I32)}, {ref(e1, {V, D})},
      {{"axis", 0}, {"dim_size", V}}, 1);
  run(OpKind::GatherGrad, {ref(Ge, {T, D}), ref(tok, {T}, DType::I32)}, {ref(e4, {V, D})},
      {{"axis", 0}, {"dim_size", V}}, 4);
  EXPECT_EQ(e1, e4);
  std::vector<double> want(V * D, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < D; ++k)
      want[tok[t] * D + k] += Ge[t * D + k];
  expectClose(e1, want, 1e-5, 1e-5);

  std::vector<int64_t> badIdx = {5};
  std::vector<float> g1(2), d1(10);
  EXPECT_THROW(run(OpKind::GatherGrad, {ref(g1, {1, 2}), ref(badIdx, {1}, DType::I64)}, {ref(d1, {5, 2})},
                   {{"axis", 0}, {"dim_size", 5}}),
               RuntimeError);
}

TEST(BackwardKernels, GatherElementsGradMatchesFiniteDifferences) {
  // data [3,4]; axis 1 with indices [3,2]; axis 0 with indices [2,4] (a smaller dim 0).
  struct Case {
    int64_t axis;
    std::vector<int64_t> ishape;
    std::vector<int64_t> idx;
  };
  std::vector<Case> cases = {{1, {3, 2}, {3, 3, 0, -4, 2, 1}}, {0, {2, 4}, {2, 0, 2, 1, 2, -3, 0, 1}}};
  for (auto &c : cases) {
    int64_t ne = c.ishape[0] * c.ishape[1];
    auto G = randomFloats(ne, 50 + c.axis);
    std::vector<float> dd(12);
    run(OpKind::GatherElementsGrad, {ref(G, c.ishape), ref(c.idx, c.ishape, DType::I64)}, {ref(dd, {3, 4})},
        {{"axis", c.axis}});
    auto fwd = [&](const std::vector<double> &data) {
      double s = 0;
      for (int64_t i = 0; i < c.ishape[0]; ++i)
        for (int64_t j = 0; j < c.ishape[1]; ++j) {
          int64_t e = i * c.ishape[1] + j, k = c.idx[e] < 0 ? c.idx[e] + (c.axis ? 4 : 3) : c.idx[e];
          s += data[c.axis ? i * 4 + k : k * 4 + j] * G[e];
        }
      return s;
    };
    expectClose(dd, numericGrad(fwd, std::vector<double>(12, 0.25)), 1e-6, 1e-6);
  }
  // Row 0, axis 1: indices 3, 3 accumulate into column 3.
  std::vector<int64_t> idx = {3, 3};
  std::vector<float> G = {1.5f, 2.25f}, dd(4);
  run(OpKind::GatherElementsGrad, {ref(G, {1, 2}), ref(idx, {1, 2}, DType::I64)}, {ref(dd, {1, 4})}, {{"axis", 1}});
  EXPECT_EQ(dd, (std::vector<float>{0, 0, 0, 3.75f}));
}

//===----------------------------------------------------------------------===//
// conv2d_grad_input, conv2d_grad_weight
//===----------------------------------------------------------------------===//

namespace {

struct ConvCase {
  int64_t N, C, H, W, O, KH, KW, sh, sw, pt, pl, pb, pr, dh, dw, G;
};

void checkConvGrads(const ConvCase &p, unsigned seed, int threads = 1) {
  SCOPED_TRACE("case seed " + std::to_string(seed));
  int64_t OH = (p.H + p.pt + p.pb - p.dh * (p.KH - 1) - 1) / p.sh + 1;
  int64_t OW = (p.W + p.pl + p.pr - p.dw * (p.KW - 1) - 1) / p.sw + 1;
  int64_t Cg = p.C / p.G, Og = p.O / p.G;
  std::vector<int64_t> xs = {p.N, p.C, p.H, p.W}, ws = {p.O, Cg, p.KH, p.KW}, ys = {p.N, p.O, OH, OW};
  auto x = randomFloats(numElements(xs), seed), w = randomFloats(numElements(ws), seed + 1),
       dy = randomFloats(numElements(ys), seed + 2);
  std::vector<double> dxWant(x.size(), 0.0), dwWant(w.size(), 0.0);
  // Direct loops over every (output, kernel tap) pair.
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o = 0; o < p.O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double gy = dy[((n * p.O + o) * OH + oh) * OW + ow];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < p.KH; ++kh)
              for (int64_t kw = 0; kw < p.KW; ++kw) {
                int64_t ih = oh * p.sh - p.pt + kh * p.dh, iw = ow * p.sw - p.pl + kw * p.dw;
                if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W)
                  continue;
                int64_t xi = ((n * p.C + (o / Og) * Cg + c) * p.H + ih) * p.W + iw;
                int64_t wi = ((o * Cg + c) * p.KH + kh) * p.KW + kw;
                dxWant[xi] += gy * w[wi];
                dwWant[wi] += gy * x[xi];
              }
        }
  nlohmann::json attrs = {{"strides", {p.sh, p.sw}},
                          {"padding", {p.pt, p.pl, p.pb, p.pr}},
                          {"dilations", {p.dh, p.dw}},
                          {"groups", p.G}};
  std::vector<float> dx(x.size(), 7.f), dw(w.size(), 7.f); // garbage: kernels must overwrite
  run(OpKind::Conv2DGradInput, {ref(dy, ys), ref(w, ws)}, {ref(dx, xs)}, attrs, threads);
  run(OpKind::Conv2DGradWeight, {ref(x, xs), ref(dy, ys)}, {ref(dw, ws)}, attrs, threads);
  expectClose(dx, dxWant, 1e-4, 1e-5);
  expectClose(dw, dwWant, 1e-4, 1e-5);

  // f64 agrees tightly.
  std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), dyd(dy.begin(), dy.end()), dxd(x.size()),
      dwd(w.size());
  run(OpKind::Conv2DGradInput, {ref(dyd, ys, DType::F64), ref(wd, ws, DType::F64)}, {ref(dxd, xs, DType::F64)},
      attrs, threads);
  run(OpKind::Conv2DGradWeight, {ref(xd, xs, DType::F64), ref(dyd, ys, DType::F64)}, {ref(dwd, ws, DType::F64)},
      attrs, threads);
  expectClose(dxd, dxWant, 1e-10, 1e-12);
  expectClose(dwd, dwWant, 1e-10, 1e-12);
}

} // namespace

TEST(BackwardKernels, Conv2dGradsMatchDirectLoops) {
  checkConvGrads({2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 60);  // same padding
  checkConvGrads({2, 2, 9, 8, 3, 3, 2, 2, 3, 1, 0, 2, 1, 1, 1, 1}, 61);  // strides, asymmetric padding
  checkConvGrads({1, 2, 10, 9, 2, 3, 3, 1, 2, 2, 1, 0, 2, 2, 3, 1}, 62); // dilation
  checkConvGrads({2, 4, 6, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2}, 63);  // groups
  checkConvGrads({2, 4, 5, 5, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 4}, 64);  // depthwise
  checkConvGrads({2, 3, 6, 5, 5, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1}, 65);  // 1x1 direct
  checkConvGrads({2, 3, 8, 12, 5, 4, 4, 4, 4, 0, 0, 0, 0, 1, 1, 1}, 66); // patch embedding
  checkConvGrads({1, 2, 9, 11, 3, 4, 3, 4, 3, 0, 0, 0, 0, 1, 1, 1}, 67); // patches, uncovered edge
  checkConvGrads({3, 6, 32, 32, 8, 4, 4, 4, 4, 0, 0, 0, 0, 1, 1, 2}, 68, 4); // patches, groups, threads
  checkConvGrads({2, 8, 20, 20, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 69, 4); // parallel im2col/col2im
}

TEST(BackwardKernels, Conv2dGradInputMatchesFiniteDifferences) {
  // Ties the direct loops above to the forward: L(x) = sum(conv(x, w) * G).
  const int64_t N = 1, C = 2, H = 5, W = 5, O = 2, K = 3, OH = 3, OW = 3; // stride 2, padding 1
  auto x = randomFloats(N * C * H * W, 70), w = randomFloats(O * C * K * K, 71), G = randomFloats(N * O * OH * OW, 72);
  auto conv = [&](const std::vector<double> &xd, const std::vector<double> &wd) {
    double s = 0;
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double y = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                int64_t ih = oh * 2 - 1 + kh, iw = ow * 2 - 1 + kw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                  y += xd[(c * H + ih) * W + iw] * wd[((o * C + c) * K + kh) * K + kw];
              }
          s += y * G[(o * OH + oh) * OW + ow];
        }
    return s;
  };
  nlohmann::json attrs = {{"strides", {2, 2}}, {"padding", {1, 1, 1, 1}}, {"dilations", {1, 1}}};
  std::vector<float> dx(x.size()), dw(w.size());
  run(OpKind::Conv2DGradInput, {ref(G, {N, O, OH, OW}), ref(w, {O, C, K, K})}, {ref(dx, {N, C, H, W})}, attrs);
  run(OpKind::Conv2DGradWeight, {ref(x, {N, C, H, W}), ref(G, {N, O, OH, OW})}, {ref(dw, {O, C, K, K})}, attrs);
  auto xd = toDouble(x), wd = toDouble(w);
  expectClose(dx, numericGrad([&](const std::vector<double> &v) { return conv(v, wd); }, xd));
  expectClose(dw, numericGrad([&](const std::vector<double> &v) { return conv(xd, v); }, wd));

  std::vector<float> badDx(N * C * H * (W + 2));
  EXPECT_THROW(run(OpKind::Conv2DGradInput, {ref(G, {N, O, OH, OW}), ref(w, {O, C, K, K})},
                   {ref(badDx, {N, C, H, W + 2})}, attrs),
               RuntimeError);
}
