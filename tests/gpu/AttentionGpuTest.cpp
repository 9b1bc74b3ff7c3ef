//===- AttentionGpuTest.cpp - cpc.attention(_grad) on the GPU against the CPU ===//
//
// MAE's shapes (encoder: 50 tokens, 64-wide heads; decoder: 197 tokens, 32-wide heads), keys !=
// queries, Dv != D, on every float type. The gradient reads the CPU forward's probabilities. The
// GPU rounds 16-bit scores to the storage type after the GEMM (the CPU keeps them in f32), so
// 16-bit results agree within a few of their rounding steps.
//
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

struct Tolerance {
  double rtol, atol;
};

Tolerance toleranceOf(DType t) {
  switch (t) {
  case DType::F64: return {1e-10, 1e-12};
  case DType::F16: return {1e-2, 2e-3};
  case DType::BF16: return {5e-2, 2e-2};
  default: return {1e-5, 1e-6};
  }
}

std::vector<int64_t> withLast(std::vector<int64_t> batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

void attentionBoth(Device *device, DType t, const std::vector<int64_t> &batch, int64_t n, int64_t m, int64_t d,
                   int64_t dv, double scale, uint64_t seed) {
  Tolerance tol = toleranceOf(t);
  nlohmann::json attrs = {{"scale", scale}};
  Tensor q = filled(t, withLast(batch, n, d), seed, -2, 2), k = filled(t, withLast(batch, m, d), seed + 1, -2, 2),
         v = filled(t, withLast(batch, m, dv), seed + 2), g = filled(t, withLast(batch, n, dv), seed + 3);
  std::vector<Tensor> results = {Tensor(t, withLast(batch, n, dv)), Tensor(t, withLast(batch, n, m))};
  compareWithCpu(device, OpKind::Attention, {q, k, v}, results, attrs, tol.rtol, tol.atol);
  std::vector<Tensor> forward = runKernel(nullptr, OpKind::Attention, {q, k, v}, results, attrs);
  compareWithCpu(device, OpKind::AttentionGrad, {q, k, v, forward[1], g},
                 {Tensor(t, q.shape), Tensor(t, k.shape), Tensor(t, v.shape)}, attrs, tol.rtol, tol.atol);
}

// Tests the encoder's and the decoder's attention of MAE in f32 (TF32 off: within 1e-5).
TEST(AttentionGpu, MaeShapes) {
  CPC_REQUIRE_GPU(device);
  attentionBoth(device, DType::F32, {4, 6}, 50, 50, 64, 64, 0.125, 1);
  attentionBoth(device, DType::F32, {2, 16}, 197, 197, 32, 32, 0.1767766952966369, 11);
}

// Tests rectangular cases (keys != queries, Dv != D, a negative scale) on every float type.
TEST(AttentionGpu, EveryFloatType) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes) {
    attentionBoth(device, t, {3}, 17, 40, 8, 5, 0.35, 21);
    attentionBoth(device, t, {2, 2}, 7, 3, 6, 2, -1.25, 31);
  }
}

// Tests token-major operands (layout "bnhd": q [B, N, H, D]) against the CPU: the GEMMs read
// each head's rows H x D apart; MAE's encoder shape and a rectangular one with several score
// groups' worth of heads on every float type.
TEST(AttentionGpu, TokenMajor) {
  CPC_REQUIRE_GPU(device);
  auto both = [&](DType t, int64_t b, int64_t h, int64_t n, int64_t m, int64_t d, int64_t dv, double scale, uint64_t seed) {
    Tolerance tol = toleranceOf(t);
    nlohmann::json attrs = {{"scale", scale}, {"layout", "bnhd"}};
    Tensor q = filled(t, {b, n, h, d}, seed, -2, 2), k = filled(t, {b, m, h, d}, seed + 1, -2, 2),
           v = filled(t, {b, m, h, dv}, seed + 2), g = filled(t, {b, n, h, dv}, seed + 3);
    std::vector<Tensor> results = {Tensor(t, {b, n, h, dv}), Tensor(t, {b, h, n, m})};
    compareWithCpu(device, OpKind::Attention, {q, k, v}, results, attrs, tol.rtol, tol.atol);
    std::vector<Tensor> forward = runKernel(nullptr, OpKind::Attention, {q, k, v}, results, attrs);
    compareWithCpu(device, OpKind::AttentionGrad, {q, k, v, forward[1], g},
                   {Tensor(t, q.shape), Tensor(t, k.shape), Tensor(t, v.shape)}, attrs, tol.rtol, tol.atol);
  };
  both(DType::F32, 4, 6, 50, 50, 64, 64, 0.125, 41);
  for (DType t : kFloatTypes)
    both(t, 3, 2, 17, 40, 8, 5, 0.35, 51);
}

} // namespace
