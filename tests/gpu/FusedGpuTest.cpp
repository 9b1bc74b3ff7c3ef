//===- FusedGpuTest.cpp - cpc.matmul_bias on the GPU against the CPU -------===//
#include "GpuTestUtil.h"

namespace cpc::gputest {
namespace {

// Tests the Linear with its bias in cuBLASLt's epilogue, then GELU, keeping the pre-activation.
TEST(FusedGpu, MatMulBiasGelu) {
  CPC_REQUIRE_GPU(device);
  Tensor x = randomF32({4, 50, 64}, 1), w = randomF32({256, 64}, 2), b = randomF32({256}, 3);
  nlohmann::json attrs = {{"transpose_rhs", true}, {"activation", "gelu"}};
  compareWithCpu(device, OpKind::MatMulBias, {x, w, b}, {Tensor(DType::F32, {4, 50, 256}), Tensor(DType::F32, {4, 50, 256})},
                 attrs, 1e-5, 1e-6, ToleranceScale::OutputRms);
}

// Tests the bias alone (no activation, no second result).
TEST(FusedGpu, MatMulBias) {
  CPC_REQUIRE_GPU(device);
  Tensor x = randomF32({200, 96}, 4), w = randomF32({96, 192}, 5), b = randomF32({192}, 6);
  compareWithCpu(device, OpKind::MatMulBias, {x, w, b}, {Tensor(DType::F32, {200, 192})}, nlohmann::json::object(), 1e-5,
                 1e-6, ToleranceScale::OutputRms);
}

} // namespace
} // namespace cpc::gputest
