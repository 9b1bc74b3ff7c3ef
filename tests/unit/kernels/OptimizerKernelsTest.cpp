//===- OptimizerKernelsTest.cpp - the AdamW kernel --------------------------===//
//
// cpc.adamw against a scalar transcription of torch.optim.AdamW's single-tensor step (each
// line below is one torch call, evaluated in float as torch's CPU kernels do), against the
// textbook formula in double, and for in-place execution.
//
#include "kernels/cpu/Kernel.h"
#include "tests/unit/TestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>

using namespace cpc;
using namespace cpc::kernels;
using cpc::test::randomFloats;

namespace {

struct Hyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
};

template <typename T> TensorRef ref(std::vector<T> &v, std::vector<int64_t> shape, DType t = DType::F32) {
  return TensorRef{v.data(), t, std::move(shape)};
}

// param, grad, exp_avg, exp_avg_sq -> new_param, new_exp_avg, new_exp_avg_sq (may be the same
// vectors as the inputs).
template <typename T>
void runAdamW(std::vector<T> &p, std::vector<T> &g, std::vector<T> &m, std::vector<T> &v, std::vector<T> &pOut,
              std::vector<T> &mOut, std::vector<T> &vOut, const Hyper &h, float step, int threads = 1) {
  DType t = std::is_same_v<T, float> ? DType::F32 : std::is_same_v<T, double> ? DType::F64 : DType::I32;
  std::vector<int64_t> shape = {(int64_t)p.size()};
  float lr = float(h.lr);
  KernelContext ctx;
  ctx.op = OpKind::AdamW;
  ctx.inputs = {ref(p, shape, t), ref(g, shape, t), ref(m, shape, t), ref(v, shape, t),
                TensorRef{&lr, DType::F32, {}}, TensorRef{&step, DType::F32, {}}};
  ctx.outputs = {ref(pOut, shape, t), ref(mOut, shape, t), ref(vOut, shape, t)};
  nlohmann::json attrs = {{"beta1", h.beta1}, {"beta2", h.beta2}, {"epsilon", h.eps}, {"weight_decay", h.wd}};
  ctx.setAttrs(attrs);
  ctx.threads = threads;
  KernelFn fn = KernelRegistry::cpu().find(OpKind::AdamW);
  ASSERT_NE(fn, nullptr);
  fn(ctx);
}

/// torch.optim.AdamW, _single_tensor_adamw, one step, element by element. Python floats are
/// doubles; they become T where they meet a tensor. lerp_ is torch's vectorized fmadd form.
template <typename T>
void torchStep(std::vector<T> &p, const std::vector<T> &g, std::vector<T> &m, std::vector<T> &v, const Hyper &h,
               int step) {
  double lr = double(float(h.lr)); // the kernel's lr is an f32 tensor
  T w = T(1 - h.beta1);
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] = p[i] * T(1 - lr * h.wd);                                                 // param.mul_(1 - lr * wd)
    m[i] = std::abs(w) < T(0.5) ? std::fma(w, g[i] - m[i], m[i])                  // exp_avg.lerp_(grad, 1 - b1)
                                : std::fma(w - T(1), g[i] - m[i], g[i]);
    v[i] = v[i] * T(h.beta2);                                                       // exp_avg_sq.mul_(b2)
    v[i] = v[i] + T(1 - h.beta2) * g[i] * g[i];                                     // .addcmul_(g, g, 1 - b2)
  }
  double bc1 = 1 - std::pow(h.beta1, double(step)), bc2 = 1 - std::pow(h.beta2, double(step));
  double stepSize = lr / bc1, bc2Sqrt = std::sqrt(bc2);
  for (size_t i = 0; i < p.size(); ++i) {
    T denom = std::sqrt(v[i]) / T(bc2Sqrt) + T(h.eps);                              // (v.sqrt() / bc2s).add_(eps)
    p[i] = p[i] + T(-stepSize) * m[i] / denom;                                      // addcdiv_(m, denom, -step_size)
  }
}

int32_t orderedBits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i < 0 ? int32_t(0x80000000u - uint32_t(i)) : i;
}
int64_t ulpDiff(float a, float b) { return std::llabs(int64_t(orderedBits(a)) - orderedBits(b)); }

void expectWithinUlps(const std::vector<float> &got, const std::vector<float> &want, int64_t ulps, const char *what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(ulpDiff(got[i], want[i]), ulps) << what << "[" << i << "]: " << got[i] << " vs " << want[i];
}

/// Gradients with a spread of magnitudes, some exactly zero.
std::vector<float> gradients(size_t n, unsigned seed) {
  auto g = randomFloats(n, seed, -1.f, 1.f);
  auto scale = randomFloats(n, seed + 100, -6.f, 2.f);
  for (size_t i = 0; i < n; ++i)
    g[i] = i % 17 == 0 ? 0.f : g[i] * std::pow(10.f, scale[i]);
  return g;
}

void checkAgainstTorch(const Hyper &h, unsigned seed) {
  const size_t n = 4096;
  auto p = randomFloats(n, seed, -2.f, 2.f);
  std::vector<float> m(n, 0.f), v(n, 0.f), pOut(n), mOut(n), vOut(n);
  std::vector<float> pRef = p, mRef = m, vRef = v;
  std::vector<double> pD(p.begin(), p.end()), mD(n, 0.0), vD(n, 0.0);
  for (int step = 1; step <= 3; ++step) {
    auto g = gradients(n, seed + 10 * step);
    runAdamW(p, g, m, v, pOut, mOut, vOut, h, float(step));
    torchStep(pRef, g, mRef, vRef, h, step);
    expectWithinUlps(pOut, pRef, 1, "param");
    expectWithinUlps(mOut, mRef, 1, "exp_avg");
    expectWithinUlps(vOut, vRef, 1, "exp_avg_sq");

    // The formula of the op's description, in double: the update agrees to ~1e-5 relative.
    double lr = double(float(h.lr));
    double bc1 = 1 - std::pow(h.beta1, step), bc2 = 1 - std::pow(h.beta2, step);
    for (size_t i = 0; i < n; ++i) {
      mD[i] = h.beta1 * mD[i] + (1 - h.beta1) * g[i];
      vD[i] = h.beta2 * vD[i] + (1 - h.beta2) * double(g[i]) * g[i];
      double delta = -lr * (mD[i] / bc1 / (std::sqrt(vD[i] / bc2) + h.eps) + h.wd * pD[i]);
      EXPECT_NEAR(double(pOut[i]) - double(p[i]), delta, 1e-4 * std::abs(delta) + 3e-7 * std::abs(p[i]))
          << "step " << step << " element " << i;
      pD[i] = pOut[i];
    }
    p = pOut;
    m = mOut;
    v = vOut;
  }
}

} // namespace

TEST(OptimizerKernels, AdamWMatchesTorchOverThreeSteps) { checkAgainstTorch(Hyper{}, 1); }

TEST(OptimizerKernels, AdamWOtherHyperparameters) {
  checkAgainstTorch(Hyper{3e-2, 0.3, 0.95, 1e-6, 0.1}, 2); // lerp weight >= 0.5: torch's other form
  checkAgainstTorch(Hyper{1e-4, 0.9, 0.98, 1e-8, 0.0}, 3); // no weight decay
}

TEST(OptimizerKernels, AdamWInPlaceMatchesSeparateOutputs) {
  const size_t n = 100003; // parallel path, odd size
  Hyper h;
  auto p = randomFloats(n, 5, -1.f, 1.f);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  std::vector<float> pIn = p, mIn = m, vIn = v, pOut(n), mOut(n), vOut(n);
  for (int step = 1; step <= 3; ++step) {
    auto g = gradients(n, 6 + step);
    runAdamW(pIn, g, mIn, vIn, pOut, mOut, vOut, h, float(step), 1);
    runAdamW(p, g, m, v, p, m, v, h, float(step), 4); // the plan's in-place form
    EXPECT_EQ(p, pOut) << "step " << step;
    EXPECT_EQ(m, mOut) << "step " << step;
    EXPECT_EQ(v, vOut) << "step " << step;
    pIn = pOut;
    mIn = mOut;
    vIn = vOut;
  }
  // The grad's buffer can also hold the new moment (any exact aliasing is per element).
  auto g = gradients(n, 20);
  std::vector<float> gAlias = g, p2 = p, m2 = m, v2 = v;
  runAdamW(p, g, m, v, pOut, mOut, vOut, h, 4.f, 2);
  runAdamW(p2, gAlias, m2, v2, p2, gAlias, v2, h, 4.f, 2);
  EXPECT_EQ(p2, pOut);
  EXPECT_EQ(gAlias, mOut);
  EXPECT_EQ(v2, vOut);
}

TEST(OptimizerKernels, AdamWF64MatchesTorchFormulas) {
  const size_t n = 257;
  Hyper h;
  auto pf = randomFloats(n, 30, -1.f, 1.f);
  std::vector<double> p(pf.begin(), pf.end()), m(n, 0.0), v(n, 0.0), pRef = p, mRef = m, vRef = v;
  for (int step = 1; step <= 3; ++step) {
    auto gf = gradients(n, 31 + step);
    std::vector<double> g(gf.begin(), gf.end());
    runAdamW(p, g, m, v, p, m, v, h, float(step));
    torchStep(pRef, g, mRef, vRef, h, step);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_DOUBLE_EQ(p[i], pRef[i]) << i;
      EXPECT_DOUBLE_EQ(m[i], mRef[i]) << i;
      EXPECT_DOUBLE_EQ(v[i], vRef[i]) << i;
    }
  }
}

TEST(OptimizerKernels, AdamWRejectsBadOperands) {
  Hyper h;
  std::vector<float> p(4, 1.f), g(4, 1.f), m(4), v(4), o1(4), o2(4), o3(4), shortV(3);
  EXPECT_THROW(runAdamW(p, g, m, v, o1, o2, o3, h, 0.f), RuntimeError); // step must be >= 1
  float lr = 1e-3f, step = 1.f;
  nlohmann::json attrs = {{"beta1", 0.9}, {"beta2", 0.999}, {"epsilon", 1e-8}, {"weight_decay", 0.0}};
  KernelContext ctx;
  ctx.op = OpKind::AdamW;
  ctx.setAttrs(attrs);
  ctx.inputs = {ref(p, {4}), ref(g, {4}), ref(m, {4}), ref(shortV, {3}), TensorRef{&lr, DType::F32, {}},
                TensorRef{&step, DType::F32, {}}};
  ctx.outputs = {ref(o1, {4}), ref(o2, {4}), ref(o3, {4})};
  KernelFn fn = KernelRegistry::cpu().find(OpKind::AdamW);
  EXPECT_THROW(fn(ctx), RuntimeError); // exp_avg_sq's shape differs
  ctx.inputs[3] = ref(v, {4});
  ctx.inputs[4] = ref(o1, {4}); // lr must be a single value
  EXPECT_THROW(fn(ctx), RuntimeError);
  ctx.inputs[4] = TensorRef{&lr, DType::F32, {}};
  fn(ctx); // and now it is well-formed
  EXPECT_LT(o1[0], 1.f);
  std::vector<int32_t> ip(4), ig(4), im(4), iv(4);
  EXPECT_THROW(runAdamW(ip, ig, im, iv, ip, im, iv, h, 1.f), RuntimeError);
}

// Tests that a grad_scale operand gives the update of the scaled gradient bit for bit: what
// cpc.mul(g, s) then cpc.adamw give (cpc-fuse-optimizer's rewrite of the clip), at 1 and 3
// threads; a scale that is not one value of the gradient's type is an error.
TEST(OptimizerKernels, AdamWGradScaleEqualsScalingFirst) {
  Hyper h{5e-2, 0.9, 0.95, 1e-8, 0.05};
  const int64_t n = 100003;
  std::vector<float> p = randomFloats(n, 1), g = randomFloats(n, 2, -3, 3), m = randomFloats(n, 3, -0.1f, 0.1f),
                     v = randomFloats(n, 4, 0, 0.01f), scaled(n);
  float coef = 0.3711f;
  for (int64_t i = 0; i < n; ++i)
    scaled[i] = g[i] * coef;
  std::vector<float> p1(n), m1(n), v1(n);
  runAdamW(p, scaled, m, v, p1, m1, v1, h, 3.f);
  for (int threads : {1, 3}) {
    std::vector<float> p2(n), m2(n), v2(n);
    float lr = float(h.lr), step = 3.f;
    KernelContext ctx;
    ctx.op = OpKind::AdamW;
    ctx.inputs = {ref(p, {n}), ref(g, {n}), ref(m, {n}), ref(v, {n}), TensorRef{&lr, DType::F32, {}},
                  TensorRef{&step, DType::F32, {}}, TensorRef{&coef, DType::F32, {}}};
    ctx.outputs = {ref(p2, {n}), ref(m2, {n}), ref(v2, {n})};
    ctx.setAttrs({{"beta1", h.beta1}, {"beta2", h.beta2}, {"epsilon", h.eps}, {"weight_decay", h.wd}});
    ctx.threads = threads;
    KernelFn fn = KernelRegistry::cpu().find(OpKind::AdamW);
    fn(ctx);
    EXPECT_EQ(p1, p2) << threads;
    EXPECT_EQ(m1, m2) << threads;
    EXPECT_EQ(v1, v2) << threads;
    double wide = coef;
    ctx.inputs[6] = TensorRef{&wide, DType::F64, {}};
    cpc::test::expectError([&] { fn(ctx); }, {"grad_scale", "f64"});
  }
}

namespace {

// Tests that cpc.multi_tensor_adamw updates each tensor as cpc.adamw (with its grad_scale and
// its own weight decay) does, bit for bit, for big and tiny and empty tensors, at 1 and 3
// threads; mismatched operands fail naming the tensor.
TEST(OptimizerKernels, MultiTensorAdamWEqualsOneUpdatePerTensor) {
  const std::vector<int64_t> sizes = {100003, 7, 0, 384, 1};
  const std::vector<double> decays = {0.05, 0.0, 0.05, 0.1, 0.0};
  size_t n = sizes.size();
  std::vector<std::vector<float>> p, g, m, v;
  for (size_t i = 0; i < n; ++i) {
    p.push_back(randomFloats(sizes[i], 10 + i));
    g.push_back(randomFloats(sizes[i], 20 + i, -3, 3));
    m.push_back(randomFloats(sizes[i], 30 + i, -0.1f, 0.1f));
    v.push_back(randomFloats(sizes[i], 40 + i, 0, 0.01f));
  }
  float lr = 0.05f, step = 4.f, coef = 0.625f;
  nlohmann::json common = {{"beta1", 0.9}, {"beta2", 0.95}, {"epsilon", 1e-8}};
  // The reference: one cpc.adamw per tensor.
  std::vector<std::vector<float>> want(3 * n);
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < 3; ++r)
      want[r * n + i].resize(sizes[i]);
    KernelContext ctx;
    ctx.op = OpKind::AdamW;
    ctx.inputs = {ref(p[i], {sizes[i]}), ref(g[i], {sizes[i]}), ref(m[i], {sizes[i]}), ref(v[i], {sizes[i]}),
                  TensorRef{&lr, DType::F32, {}}, TensorRef{&step, DType::F32, {}}, TensorRef{&coef, DType::F32, {}}};
    ctx.outputs = {ref(want[i], {sizes[i]}), ref(want[n + i], {sizes[i]}), ref(want[2 * n + i], {sizes[i]})};
    nlohmann::json attrs = common;
    attrs["weight_decay"] = decays[i];
    ctx.setAttrs(attrs);
    KernelRegistry::cpu().find(OpKind::AdamW)(ctx);
  }
  for (int threads : {1, 3}) {
    std::vector<std::vector<float>> got(3 * n);
    KernelContext ctx;
    ctx.op = OpKind::MultiTensorAdamW;
    ctx.inputs = {TensorRef{&lr, DType::F32, {}}, TensorRef{&step, DType::F32, {}}, TensorRef{&coef, DType::F32, {}}};
    for (auto *group : {&p, &g, &m, &v})
      for (size_t i = 0; i < n; ++i)
        ctx.inputs.push_back(ref((*group)[i], {sizes[i]}));
    for (size_t k = 0; k < 3 * n; ++k) {
      got[k].resize(sizes[k % n]);
      ctx.outputs.push_back(ref(got[k], {sizes[k % n]}));
    }
    nlohmann::json attrs = common;
    attrs["weight_decays"] = decays;
    ctx.setAttrs(attrs);
    ctx.threads = threads;
    KernelFn fn = KernelRegistry::cpu().find(OpKind::MultiTensorAdamW);
    ASSERT_NE(fn, nullptr);
    fn(ctx);
    for (size_t k = 0; k < 3 * n; ++k)
      EXPECT_EQ(got[k], want[k]) << "result " << k << " threads " << threads;
    ctx.inputs[3 + n + 1] = ref(g[0], {sizes[0]}); // tensor 1's gradient with tensor 0's shape
    cpc::test::expectError([&] { fn(ctx); }, {"tensor 1"});
    ctx.inputs.pop_back();
    cpc::test::expectError([&] { fn(ctx); }, {"4 N tensors"});
  }
}

} // namespace
