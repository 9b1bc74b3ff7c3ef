//===- NormalizationGpuTest.cpp - softmax, LayerNorm and gradients against the CPU ===//
//
// Every kernel of kernels/cuda/Normalization.cu on every float type: MAE-like shapes, rows of
// 1..3000 elements (a warp per row up to 1024, a block beyond), axes that are not the last, a
// large mean; f32 within 1e-5 relative, f64 tighter, 16-bit floats within a rounding step.
//
#include "kernels/Float16.h"
#include "kernels/Kernel.h"
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

double rtolOf(DType t) {
  switch (t) {
  case DType::F64: return 1e-10;
  case DType::F16: return 2e-3;
  case DType::BF16: return 1.6e-2;
  default: return 1e-5;
  }
}

const std::vector<int64_t> kRowLengths = {1, 2, 3, 31, 32, 33, 100, 192, 511, 1000, 1024, 1025, 1537, 2048, 3000};

void softmaxBoth(Device *device, DType t, std::vector<int64_t> shape, int64_t axis, uint64_t seed, float spread = 8) {
  nlohmann::json attrs = {{"axis", axis}};
  compareWithCpu(device, OpKind::Softmax, {filled(t, shape, seed, -spread, spread)}, {Tensor(t, shape)}, attrs,
                 rtolOf(t));
  // softmax_grad on a softmax-like y (positive, small) and any g.
  compareWithCpu(device, OpKind::SoftmaxGrad, {filled(t, shape, seed + 1, 0, 0.1f), filled(t, shape, seed + 2)},
                 {Tensor(t, shape)}, attrs, rtolOf(t));
}

void layerNormBoth(Device *device, DType t, std::vector<int64_t> shape, int64_t axis, uint64_t seed, float mean = 0,
                   float spread = 2) {
  std::vector<int64_t> normalized(shape.begin() + axis, shape.end());
  Tensor x = filled(t, shape, seed, mean - spread, mean + spread);
  Tensor scale = filled(t, normalized, seed + 1, 0.5f, 1.5f), bias = filled(t, normalized, seed + 2);
  nlohmann::json attrs = {{"axis", axis}, {"epsilon", 1e-5}};
  compareWithCpu(device, OpKind::LayerNorm, {x, scale, bias}, {Tensor(t, shape)}, attrs, rtolOf(t));
  compareWithCpu(device, OpKind::LayerNormGrad, {x, scale, filled(t, shape, seed + 3)},
                 {Tensor(t, shape), Tensor(t, normalized), Tensor(t, normalized)}, attrs, rtolOf(t));
}

} // namespace

TEST(NormalizationGpu, SoftmaxOnMaeShapes) {
  CPC_REQUIRE_GPU(device);
  softmaxBoth(device, DType::F32, {8 * 50, 192}, 1, 1);
  softmaxBoth(device, DType::F32, {8 * 17, 128}, 1, 2);
  softmaxBoth(device, DType::F32, {8, 3, 50, 50}, 3, 3);
}

TEST(NormalizationGpu, SoftmaxOnRowsOfEveryLength) {
  CPC_REQUIRE_GPU(device);
  for (int64_t len : kRowLengths)
    softmaxBoth(device, DType::F32, {5, len}, 1, 10 + len, 30);
}

TEST(NormalizationGpu, SoftmaxAlongAnAxisThatIsNotLast) {
  CPC_REQUIRE_GPU(device);
  softmaxBoth(device, DType::F32, {4, 37, 6}, 1, 4);
  softmaxBoth(device, DType::F32, {50, 7}, 0, 5);
  softmaxBoth(device, DType::F32, {2, 1500, 3}, 1, 6);
}

TEST(NormalizationGpu, SoftmaxOnEveryFloatType) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes) {
    softmaxBoth(device, t, {8 * 17, 128}, 1, 7);
    softmaxBoth(device, t, {3, 2000}, 1, 8);
    softmaxBoth(device, t, {4, 37, 6}, 1, 9);
  }
}

TEST(NormalizationGpu, LayerNormOnMaeShapes) {
  CPC_REQUIRE_GPU(device);
  layerNormBoth(device, DType::F32, {8, 50, 192}, 2, 21);
  layerNormBoth(device, DType::F32, {8 * 17, 128}, 1, 22);
  layerNormBoth(device, DType::F32, {8 * 50, 192}, 1, 23, 1000, 3); // |mean| >> stddev
  layerNormBoth(device, DType::F32, {4, 6, 8}, 1, 24);              // over the last two dims
  layerNormBoth(device, DType::F32, {20000, 64}, 1, 25);            // many chunks of rows
}

TEST(NormalizationGpu, LayerNormOnRowsOfEveryLength) {
  CPC_REQUIRE_GPU(device);
  for (int64_t len : kRowLengths)
    layerNormBoth(device, DType::F32, {3, len}, 1, 30 + len, 0.5f, 4);
}

TEST(NormalizationGpu, LayerNormOnEveryFloatType) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes) {
    layerNormBoth(device, t, {8 * 17, 128}, 1, 41);
    layerNormBoth(device, t, {5, 3000}, 1, 42);
  }
}

TEST(NormalizationGpu, LayerNormGradOfNoRowsIsZero) {
  CPC_REQUIRE_GPU(device);
  nlohmann::json attrs = {{"axis", 1}, {"epsilon", 1e-5}};
  compareWithCpu(device, OpKind::LayerNormGrad, {filled(DType::F32, {0, 8}, 1), filled(DType::F32, {8}, 2),
                                                 filled(DType::F32, {0, 8}, 3)},
                 {Tensor(DType::F32, {0, 8}), filled(DType::F32, {8}, 4), filled(DType::F32, {8}, 5)}, attrs);
}

// Tests the residual fusions (cpc-fuse-residual-norm) against the CPU: add_layer_norm's sum and
// normalized rows, and layer_norm_grad_add's gradients, on MAE's shapes and rows of every
// length, f32 and f64.
TEST(NormalizationGpu, ResidualLayerNorms) {
  CPC_REQUIRE_GPU(device);
  auto both = [&](DType t, std::vector<int64_t> shape, int64_t axis, uint64_t seed) {
    std::vector<int64_t> normalized(shape.begin() + axis, shape.end());
    Tensor a = filled(t, shape, seed, -2, 2), b = filled(t, shape, seed + 1, -2, 2);
    Tensor scale = filled(t, normalized, seed + 2, 0.5f, 1.5f), bias = filled(t, normalized, seed + 3);
    nlohmann::json attrs = {{"axis", axis}, {"epsilon", 1e-5}};
    compareWithCpu(device, OpKind::AddLayerNorm, {a, b, scale, bias}, {Tensor(t, shape), Tensor(t, shape)}, attrs,
                   rtolOf(t));
    compareWithCpu(device, OpKind::LayerNormGradAdd, {a, scale, b, filled(t, shape, seed + 4)},
                   {Tensor(t, shape), Tensor(t, normalized), Tensor(t, normalized)}, attrs, rtolOf(t));
  };
  both(DType::F32, {8, 50, 192}, 2, 61);
  both(DType::F32, {8 * 17, 128}, 1, 62);
  both(DType::F64, {4, 6, 8}, 1, 63);
  for (int64_t len : kRowLengths)
    both(DType::F32, {3, len}, 1, 70 + len);
}
