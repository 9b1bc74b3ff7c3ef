//===- ConvPlanTest.cpp - what the CUDA convs hand cuDNN, on the host ------===//
//
// Each case plans a convolution as the CUDA kernels do (kernels/cuda/ConvPlan.h), builds what
// cuDNN is given (the input, or its zero-padded copy made with windowSource as the copy kernel
// does), emulates cuDNN's legacy API on it (cross-correlation with the plan's symmetric padding,
// by im2col and GEMM; the data gradient by the adjoint, cropped back when pre-padded; the filter
// gradient) and compares with the CPU kernels of cpc.conv2d, cpc.conv2d_grad_input and
// cpc.conv2d_grad_weight.
//
#include "kernels/cuda/ConvPlan.h"
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

struct Conv {
  std::vector<int64_t> x, w, y;
  std::vector<int64_t> strides{1, 1}, padding{0, 0, 0, 0}, dilations{1, 1};
  int64_t groups = 1;
  nlohmann::json attrs() const {
    return {{"strides", strides}, {"padding", padding}, {"dilations", dilations}, {"groups", groups}};
  }
  std::string describe() const {
    return "x " + shapeString(x) + " w " + shapeString(w) + " y " + shapeString(y) + " strides " +
           shapeString(strides) + " padding " + shapeString(padding) + " dilations " + shapeString(dilations) +
           " groups " + std::to_string(groups);
  }
  ConvPlan plan(ConvOp op, int64_t bias = -1) const {
    return planConv(op, x, w, y, strides, padding, dilations, groups, bias);
  }
};

/// Runs the CPU kernel `op` on f32 operands; throws its RuntimeError on rejected shapes.
std::vector<float> cpuRun(OpKind op, const Conv &c, std::vector<std::vector<float>> inputs,
                          const std::vector<std::vector<int64_t>> &shapes, const std::vector<int64_t> &outShape) {
  std::vector<float> out(numElements(outShape));
  KernelContext ctx;
  ctx.op = op;
  for (size_t i = 0; i < inputs.size(); ++i)
    ctx.inputs.push_back(TensorRef{inputs[i].data(), DType::F32, shapes[i]});
  ctx.outputs = {TensorRef{out.data(), DType::F32, outShape}};
  ctx.setAttrs(c.attrs());
  runCpuKernel(ctx);
  return out;
}

/// x as cuDNN reads it: x itself, or the zero-padded copy the pad kernel makes.
std::vector<double> cudnnInput(const ConvPlan &p, const std::vector<float> &x) {
  if (!p.prePad)
    return std::vector<double>(x.begin(), x.end());
  std::vector<double> padded(p.N * p.C * p.cudnnH * p.cudnnW);
  for (int64_t i = 0; i < (int64_t)padded.size(); ++i) {
    int64_t s = windowSource(i, p.cudnnH, p.cudnnW, p.H, p.W, -p.padTop, -p.padLeft);
    padded[i] = s < 0 ? 0.0 : x[s];
  }
  return padded;
}

/// cuDNN's im2col of image n, group g of its input `in` ([N, C, cudnnH, cudnnW]) with its
/// symmetric padding: col[(c, kh, kw), (oh, ow)]; each element's index in `in`, -1 in padding.
std::vector<int64_t> im2colIndices(const ConvPlan &p, int64_t n, int64_t g) {
  int64_t Cg = p.C / p.G, P = p.OH * p.OW;
  std::vector<int64_t> col(Cg * p.KH * p.KW * P);
  for (int64_t c = 0; c < Cg; ++c)
    for (int64_t kh = 0; kh < p.KH; ++kh)
      for (int64_t kw = 0; kw < p.KW; ++kw)
        for (int64_t oh = 0; oh < p.OH; ++oh)
          for (int64_t ow = 0; ow < p.OW; ++ow) {
            int64_t ih = oh * p.strideH - p.cudnnPadH + kh * p.dilationH;
            int64_t iw = ow * p.strideW - p.cudnnPadW + kw * p.dilationW;
            bool inside = ih >= 0 && ih < p.cudnnH && iw >= 0 && iw < p.cudnnW;
            col[((c * p.KH + kh) * p.KW + kw) * P + oh * p.OW + ow] =
                inside ? ((n * p.C + g * Cg + c) * p.cudnnH + ih) * p.cudnnW + iw : -1;
          }
  return col;
}

/// cuDNN's output extent for its input, padding, stride and dilation (floor division).
void expectCudnnExtent(const ConvPlan &p) {
  auto extent = [](int64_t in, int64_t pad, int64_t k, int64_t s, int64_t d) {
    int64_t span = in + 2 * pad - (d * (k - 1) + 1);
    return span < 0 ? 0 : span / s + 1;
  };
  EXPECT_EQ(extent(p.cudnnH, p.cudnnPadH, p.KH, p.strideH, p.dilationH), p.OH);
  EXPECT_EQ(extent(p.cudnnW, p.cudnnPadW, p.KW, p.strideW, p.dilationW), p.OW);
  EXPECT_TRUE(p.cudnnPadH >= 0 && p.cudnnPadW >= 0);
  if (!p.prePad) {
    EXPECT_EQ(p.cudnnH, p.H);
    EXPECT_EQ(p.cudnnW, p.W);
  } else {
    EXPECT_EQ(p.cudnnPadH, 0);
    EXPECT_EQ(p.cudnnPadW, 0);
  }
}

/// y = conv(x, w) + bias as cuDNN computes it on the plan's input.
std::vector<float> emulateForward(const ConvPlan &p, const std::vector<float> &x, const std::vector<float> &w,
                                  const std::vector<float> *bias) {
  std::vector<double> in = cudnnInput(p, x);
  int64_t Cg = p.C / p.G, Og = p.O / p.G, Kc = Cg * p.KH * p.KW, P = p.OH * p.OW;
  std::vector<float> y(p.N * p.O * P);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t g = 0; g < p.G; ++g) {
      std::vector<int64_t> col = im2colIndices(p, n, g);
      for (int64_t o = 0; o < Og; ++o)
        for (int64_t q = 0; q < P; ++q) {
          double sum = 0;
          for (int64_t r = 0; r < Kc; ++r)
            if (col[r * P + q] >= 0)
              sum += w[(g * Og + o) * Kc + r] * in[col[r * P + q]];
          int64_t oc = g * Og + o;
          // The bias is in the result before cuDNN adds the convolution (beta = 1).
          y[(n * p.O + oc) * P + q] = (float)((bias ? (*bias)[oc] : 0.0) + sum);
        }
    }
  return y;
}

/// dx as cuDNN's data gradient (the adjoint of im2col) into its input's shape, then cropped.
std::vector<float> emulateGradInput(const ConvPlan &p, const std::vector<float> &dy, const std::vector<float> &w) {
  int64_t Cg = p.C / p.G, Og = p.O / p.G, Kc = Cg * p.KH * p.KW, P = p.OH * p.OW;
  std::vector<double> dxc(p.N * p.C * p.cudnnH * p.cudnnW, 0.0);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t g = 0; g < p.G; ++g) {
      std::vector<int64_t> col = im2colIndices(p, n, g);
      for (int64_t r = 0; r < Kc; ++r)
        for (int64_t q = 0; q < P; ++q) {
          if (col[r * P + q] < 0)
            continue;
          double sum = 0;
          for (int64_t o = 0; o < Og; ++o)
            sum += w[(g * Og + o) * Kc + r] * dy[(n * p.O + g * Og + o) * P + q];
          dxc[col[r * P + q]] += sum;
        }
    }
  std::vector<float> dx(p.N * p.C * p.H * p.W);
  for (int64_t i = 0; i < (int64_t)dx.size(); ++i) {
    int64_t s = p.prePad ? windowSource(i, p.H, p.W, p.cudnnH, p.cudnnW, p.padTop, p.padLeft) : i;
    dx[i] = s < 0 ? 0.0f : (float)dxc[s];
  }
  return dx;
}

/// dw as cuDNN's filter gradient over the plan's input.
std::vector<float> emulateGradWeight(const ConvPlan &p, const std::vector<float> &x, const std::vector<float> &dy) {
  std::vector<double> in = cudnnInput(p, x);
  int64_t Cg = p.C / p.G, Og = p.O / p.G, Kc = Cg * p.KH * p.KW, P = p.OH * p.OW;
  std::vector<double> dw(p.O * Kc, 0.0);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t g = 0; g < p.G; ++g) {
      std::vector<int64_t> col = im2colIndices(p, n, g);
      for (int64_t o = 0; o < Og; ++o)
        for (int64_t r = 0; r < Kc; ++r) {
          double sum = 0;
          for (int64_t q = 0; q < P; ++q)
            if (col[r * P + q] >= 0)
              sum += dy[(n * p.O + g * Og + o) * P + q] * in[col[r * P + q]];
          dw[(g * Og + o) * Kc + r] += sum;
        }
    }
  return std::vector<float>(dw.begin(), dw.end());
}

void expectNear(const std::vector<float> &got, const std::vector<float> &want, double rel = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= rel * std::max(1.0, std::fabs((double)want[i]))) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": emulated " << got[i] << ", cpu " << want[i];
}

/// The three ops of `c` (forward with and without a bias) against the CPU kernels.
void checkConv(const Conv &c, bool expectPrePad) {
  SCOPED_TRACE(c.describe());
  std::vector<float> x = uniformValues<float>(numElements(c.x), 1), w = uniformValues<float>(numElements(c.w), 2);
  std::vector<float> dy = uniformValues<float>(numElements(c.y), 3), bias = uniformValues<float>(c.w[0], 4);
  ConvPlan fwd = c.plan(ConvOp::Forward, c.w[0]);
  ASSERT_TRUE(fwd.ok()) << fwd.error;
  if (!fwd.empty && !fwd.zeroResult) {
    EXPECT_EQ(fwd.prePad, expectPrePad);
    expectCudnnExtent(fwd);
  }
  std::vector<float> want = cpuRun(OpKind::Conv2D, c, {x, w, bias}, {c.x, c.w, {c.w[0]}}, c.y);
  if (!fwd.empty)
    expectNear(emulateForward(fwd, x, w, &bias), want);
  ConvPlan plain = c.plan(ConvOp::Forward);
  ASSERT_TRUE(plain.ok()) << plain.error;
  if (!plain.empty)
    expectNear(emulateForward(plain, x, w, nullptr), cpuRun(OpKind::Conv2D, c, {x, w}, {c.x, c.w}, c.y));

  ConvPlan gi = c.plan(ConvOp::GradInput);
  ASSERT_TRUE(gi.ok()) << gi.error;
  EXPECT_EQ(gi.prePad, fwd.prePad);
  want = cpuRun(OpKind::Conv2DGradInput, c, {dy, w}, {c.y, c.w}, c.x);
  std::vector<float> got = gi.zeroResult || gi.empty ? std::vector<float>(want.size(), 0) : emulateGradInput(gi, dy, w);
  expectNear(got, want);

  ConvPlan gw = c.plan(ConvOp::GradWeight);
  ASSERT_TRUE(gw.ok()) << gw.error;
  want = cpuRun(OpKind::Conv2DGradWeight, c, {x, dy}, {c.x, c.y}, c.w);
  got = gw.zeroResult || gw.empty ? std::vector<float>(want.size(), 0) : emulateGradWeight(gw, x, dy);
  expectNear(got, want);
}

} // namespace

TEST(ConvPlan, MaePatchEmbedding) {
  // 16x16 patches, stride 16, 3 -> 192 channels on 32x32 images.
  Conv c{{2, 3, 32, 32}, {192, 3, 16, 16}, {2, 192, 2, 2}, {16, 16}};
  checkConv(c, false);
  ConvPlan p = c.plan(ConvOp::Forward, 192);
  EXPECT_EQ(p.cudnnPadH, 0);
  EXPECT_EQ(p.cudnnInputShape(), (std::vector<int64_t>{2, 3, 32, 32}));
}

TEST(ConvPlan, ThreeByThree) {
  checkConv({{2, 4, 8, 8}, {6, 4, 3, 3}, {2, 6, 8, 8}, {1, 1}, {1, 1, 1, 1}}, false);         // same padding
  checkConv({{2, 4, 8, 8}, {6, 4, 3, 3}, {2, 6, 4, 4}, {2, 2}, {1, 1, 1, 1}}, false);         // strided
  checkConv({{1, 3, 7, 7}, {4, 3, 3, 3}, {1, 4, 3, 3}, {2, 2}, {0, 0, 1, 1}}, true);          // SAME, asymmetric
  checkConv({{1, 3, 6, 5}, {4, 3, 3, 3}, {1, 4, 6, 3}, {1, 1}, {1, 0, 1, 0}}, false);         // pad rows only
  checkConv({{2, 4, 9, 9}, {6, 2, 3, 3}, {2, 6, 9, 9}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 2}, false); // groups, dilation
  checkConv({{1, 4, 5, 5}, {4, 1, 3, 3}, {1, 4, 5, 5}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4}, false); // depthwise
  checkConv({{2, 8, 5, 5}, {4, 8, 1, 1}, {2, 4, 5, 5}}, false);                               // 1x1
}

TEST(ConvPlan, PaddingCuDnnCannotTake) {
  // Truncating division: (2 - 3) / 2 + 1 = 1 output row that reads one row of zeros beyond x.
  checkConv({{1, 2, 2, 2}, {3, 2, 3, 3}, {1, 3, 1, 1}, {2, 2}}, true);
  ConvPlan p = Conv{{1, 2, 2, 2}, {3, 2, 3, 3}, {1, 3, 1, 1}, {2, 2}}.plan(ConvOp::Forward);
  EXPECT_EQ(p.cudnnH, 3);
  // Negative padding crops the input; its gradient there is zero.
  checkConv({{1, 2, 6, 6}, {2, 2, 3, 3}, {1, 2, 3, 5}, {1, 1}, {-1, 0, 0, 1}}, true);
  checkConv({{2, 2, 7, 6}, {3, 2, 2, 3}, {2, 3, 4, 2}, {2, 3}, {1, 2, 0, 0}, {1, 2}}, true);
}

TEST(ConvPlan, EmptySums) {
  // No input channels: the result is the bias; no images or no positions: zero gradients.
  Conv noChannels{{1, 0, 4, 4}, {2, 0, 3, 3}, {1, 2, 2, 2}};
  EXPECT_TRUE(noChannels.plan(ConvOp::Forward, 2).zeroResult);
  checkConv(noChannels, false);
  Conv noImages{{0, 2, 4, 4}, {3, 2, 3, 3}, {0, 3, 2, 2}};
  EXPECT_TRUE(noImages.plan(ConvOp::Forward).empty);
  EXPECT_TRUE(noImages.plan(ConvOp::GradWeight).zeroResult);
  checkConv(noImages, false);
}

// The plan rejects what the CPU kernels reject, with their messages.
TEST(ConvPlan, RejectsWhatTheCpuRejects) {
  std::vector<Conv> bad = {
      {{1, 3, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}},                                  // rank
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}, {1}},                          // strides
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}, {1, 1}, {0, 0}},               // padding
      {{1, 4, 8, 8}, {4, 4, 3, 3}, {1, 4, 6, 6}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 2}, // weight vs groups
      {{1, 3, 8, 8}, {4, 2, 3, 3}, {1, 4, 6, 6}},                               // weight channels
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 7, 6}},                               // result extent
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {2, 4, 6, 6}},                               // result batch
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 5, 6, 6}},                               // result channels
  };
  auto expectSameRejection = [](OpKind op, const ConvPlan &p, auto &&run) {
    ASSERT_FALSE(p.ok()) << op;
    try {
      run();
      ADD_FAILURE() << op << " accepted it";
    } catch (const RuntimeError &e) {
      EXPECT_EQ(std::string(e.what()), std::string(opName(op)) + ": " + p.error);
    }
  };
  for (const Conv &c : bad) {
    SCOPED_TRACE(c.describe());
    std::vector<float> x(std::max<int64_t>(numElements(c.x), 1)), w(std::max<int64_t>(numElements(c.w), 1)),
        y(std::max<int64_t>(numElements(c.y), 1));
    expectSameRejection(OpKind::Conv2D, c.plan(ConvOp::Forward), [&] {
      cpuRun(OpKind::Conv2D, c, {x, w}, {c.x, c.w}, c.y);
    });
    expectSameRejection(OpKind::Conv2DGradInput, c.plan(ConvOp::GradInput),
                        [&] { cpuRun(OpKind::Conv2DGradInput, c, {y, w}, {c.y, c.w}, c.x); });
    expectSameRejection(OpKind::Conv2DGradWeight, c.plan(ConvOp::GradWeight),
                        [&] { cpuRun(OpKind::Conv2DGradWeight, c, {x, y}, {c.x, c.y}, c.w); });
  }
  // A bias of the wrong length (the forward only).
  Conv c{{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}};
  std::vector<float> x(numElements(c.x)), w(numElements(c.w)), b(3);
  expectSameRejection(OpKind::Conv2D, c.plan(ConvOp::Forward, 3),
                      [&] { cpuRun(OpKind::Conv2D, c, {x, w, b}, {c.x, c.w, {3}}, c.y); });
  // Zero strides: the CPU gradients reject them (the forward would divide by zero).
  Conv zeroStride{{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}, {0, 1}};
  const Conv &z = zeroStride;
  std::vector<float> y(numElements(z.y));
  expectSameRejection(OpKind::Conv2DGradWeight, z.plan(ConvOp::GradWeight),
                      [&] { cpuRun(OpKind::Conv2DGradWeight, z, {x, y}, {z.x, z.y}, z.w); });
  EXPECT_FALSE(zeroStride.plan(ConvOp::Forward).ok());
}

TEST(ConvPlan, WindowCopyRoundTrip) {
  // Padding by (top 2, left 1) and cropping back is the identity; the border is zero.
  int64_t planes = 3, H = 4, W = 5, PH = 7, PW = 8;
  std::vector<int64_t> x(planes * H * W);
  for (int64_t i = 0; i < (int64_t)x.size(); ++i)
    x[i] = i + 1;
  std::vector<int64_t> padded(planes * PH * PW);
  int64_t zeros = 0;
  for (int64_t i = 0; i < (int64_t)padded.size(); ++i) {
    int64_t s = windowSource(i, PH, PW, H, W, -2, -1);
    padded[i] = s < 0 ? 0 : x[s];
    zeros += s < 0;
  }
  EXPECT_EQ(zeros, planes * (PH * PW - H * W));
  for (int64_t i = 0; i < (int64_t)x.size(); ++i) {
    int64_t s = windowSource(i, H, W, PH, PW, 2, 1);
    ASSERT_GE(s, 0);
    EXPECT_EQ(padded[s], x[i]);
  }
  EXPECT_EQ(biasChannel(2 * 6 * 4 + 13, 4, 6), 3); // image 2, channel 3, position 1
}
