//===- LinalgGpuTest.cpp - cuBLASLt matmul and cuDNN convs against the CPU ===//
#include "kernels/cuda/Matmul.h"
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

/// Tolerances per element type: f32 within 1e-5 (no TF32), 16-bit within a few ulps of one
/// rounding (the summation orders differ).
struct Tolerance {
  double rtol, atol;
};
Tolerance toleranceFor(DType t) {
  switch (t) {
  case DType::F64: return {1e-12, 1e-12};
  case DType::F16: return {4e-3, 4e-3};
  case DType::BF16: return {2e-2, 2e-2};
  default: return {1e-5, 1e-5};
  }
}

void checkMatmul(Device *device, DType t, std::vector<int64_t> lhs, std::vector<int64_t> rhs, std::vector<int64_t> out,
                 bool tl = false, bool tr = false) {
  SCOPED_TRACE(std::string(dtypeName(t)) + " " + shapeString(lhs) + (tl ? "^T" : "") + " x " + shapeString(rhs) +
               (tr ? "^T" : ""));
  Tolerance tol = toleranceFor(t);
  compareWithCpu(device, OpKind::MatMul, {filled(t, lhs, 1), filled(t, rhs, 2)}, {Tensor(t, out)},
                 {{"transpose_lhs", tl}, {"transpose_rhs", tr}}, tol.rtol, tol.atol,
                 ToleranceScale::OutputRms);
}

struct ConvCase {
  std::vector<int64_t> x, w, y;
  std::vector<int64_t> strides{1, 1}, padding{0, 0, 0, 0}, dilations{1, 1};
  int64_t groups = 1;
  nlohmann::json attrs() const {
    return {{"strides", strides}, {"padding", padding}, {"dilations", dilations}, {"groups", groups}};
  }
};

/// Forward with and without a bias, and both gradients.
void checkConv(Device *device, DType t, const ConvCase &c) {
  SCOPED_TRACE(std::string(dtypeName(t)) + " x " + shapeString(c.x) + " w " + shapeString(c.w) + " padding " +
               shapeString(c.padding) + " strides " + shapeString(c.strides));
  Tolerance tol = toleranceFor(t);
  Tensor x = filled(t, c.x, 3), w = filled(t, c.w, 4), dy = filled(t, c.y, 5), bias = filled(t, {c.w[0]}, 6);
  compareWithCpu(device, OpKind::Conv2D, {x, w, bias}, {Tensor(t, c.y)}, c.attrs(), tol.rtol, tol.atol,
                 ToleranceScale::OutputRms);
  compareWithCpu(device, OpKind::Conv2D, {x, w}, {Tensor(t, c.y)}, c.attrs(), tol.rtol, tol.atol,
                 ToleranceScale::OutputRms);
  compareWithCpu(device, OpKind::Conv2DGradInput, {dy, w}, {Tensor(t, c.x)}, c.attrs(), tol.rtol, tol.atol,
                 ToleranceScale::OutputRms);
  compareWithCpu(device, OpKind::Conv2DGradWeight, {x, dy}, {Tensor(t, c.w)}, c.attrs(), tol.rtol, tol.atol,
                 ToleranceScale::OutputRms);
}

const ConvCase kMaePatchEmbedding{{2, 3, 32, 32}, {192, 3, 16, 16}, {2, 192, 2, 2}, {16, 16}};
const ConvCase kSame3x3{{2, 4, 8, 8}, {6, 4, 3, 3}, {2, 6, 8, 8}, {1, 1}, {1, 1, 1, 1}};

} // namespace

TEST(LinalgGpu, MatmulShapes) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes) {
    checkMatmul(device, t, {3, 4}, {4, 5}, {3, 5});
    checkMatmul(device, t, {4, 3}, {5, 4}, {3, 5}, true, true);
    checkMatmul(device, t, {4}, {4, 5}, {5});
    checkMatmul(device, t, {2, 3, 4}, {4}, {2, 3});
    checkMatmul(device, t, {2, 3, 4}, {2, 4, 5}, {2, 3, 5});
    checkMatmul(device, t, {3, 4}, {2, 4, 5}, {2, 3, 5});                  // lhs broadcast: stride 0
    checkMatmul(device, t, {2, 1, 3, 4}, {1, 3, 4, 5}, {2, 3, 3, 5});      // host loop over a batch dim
    checkMatmul(device, t, {2, 1, 4, 3}, {3, 5, 4}, {2, 3, 3, 5}, true, true);
    checkMatmul(device, t, {2, 3, 0}, {2, 0, 5}, {2, 3, 5});               // K = 0: zeros
  }
}

TEST(LinalgGpu, MatmulMaeShapes) {
  CPC_REQUIRE_GPU(device);
  int64_t B = 2, H = 3, N = 50, D = 64;
  for (DType t : kFloatTypes) {
    checkMatmul(device, t, {B, H, N, D}, {B, H, D, N}, {B, H, N, N});
    checkMatmul(device, t, {B, H, N, D}, {B, H, N, D}, {B, H, N, N}, false, true);
    checkMatmul(device, t, {B, H, N, N}, {B, H, N, D}, {B, H, N, D});
    checkMatmul(device, t, {B, H, N, N}, {B, H, N, D}, {B, H, N, D}, true, false);
    checkMatmul(device, t, {B * N, D}, {D, 4 * D}, {B * N, 4 * D});
    checkMatmul(device, t, {B, N, D}, {D, 4 * D}, {B, N, 4 * D});
    checkMatmul(device, t, {B * N, D}, {B * N, 4 * D}, {D, 4 * D}, true, false);
    checkMatmul(device, t, {B * N, 4 * D}, {D, 4 * D}, {B * N, D}, false, true);
  }
}

// launchGemmWithEpilogue against the CPU's matmul, add and gelu (tanh form, cuBLASLt's).
TEST(LinalgGpu, GemmBiasAndGeluEpilogues) {
  CPC_REQUIRE_GPU(device);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (auto epilogue : {kernels::cuda::GemmEpilogue::Bias, kernels::cuda::GemmEpilogue::GeluBias}) {
      bool gelu = epilogue == kernels::cuda::GemmEpilogue::GeluBias;
      SCOPED_TRACE(std::string(dtypeName(t)) + (gelu ? " gelu+bias" : " bias"));
      int64_t B = 2, N = 50, D = 64;
      Tensor x = filled(t, {B, N, D}, 7), w = filled(t, {D, 4 * D}, 8), b = filled(t, {4 * D}, 9);
      // CPU: matmul, + bias, gelu; each rounds (the fused GEMM rounds once: 16-bit tolerances).
      auto runCpu = [&](OpKind op, std::vector<Tensor> ins, const nlohmann::json &attrs) {
        return runKernel(nullptr, op, std::move(ins), {Tensor(t, {B, N, 4 * D})}, attrs)[0];
      };
      Tensor product = runCpu(OpKind::MatMul, {x, w}, nlohmann::json::object());
      Tensor biased = runCpu(OpKind::Add, {product, b}, nlohmann::json::object());
      Tensor want = gelu ? runCpu(OpKind::Gelu, {biased}, {{"approximate", "tanh"}}) : biased;
      // GPU.
      Allocator &memory = device->allocator(MemorySpace::Device);
      auto upload = [&](Tensor &h) {
        void *p = memory.allocate(h.bytes.size());
        device->copy(p, MemorySpace::Device, h.bytes.data(), MemorySpace::Host, h.bytes.size());
        return TensorRef{p, h.dtype, h.shape};
      };
      Tensor got(t, {B, N, 4 * D});
      TensorRef dx = upload(x), dw = upload(w), db = upload(b), dout = upload(got);
      kernels::KernelContext ctx;
      ctx.op = OpKind::MatMulBias; // the fused GEMM's epilogue, for messages
      ctx.device = device;
      kernels::cuda::launchGemmWithEpilogue(ctx, dx, dw, &db, dout, false, false, epilogue);
      device->synchronize();
      device->copy(got.bytes.data(), MemorySpace::Host, dout.data, MemorySpace::Device, got.bytes.size());
      for (TensorRef *r : {&dx, &dw, &db, &dout})
        memory.deallocate(r->data);
      Tolerance tol = toleranceFor(t);
      std::vector<double> w64 = toDoubles(t, want.bytes), g64 = toDoubles(t, got.bytes);
      int64_t bad = 0;
      for (size_t i = 0; i < w64.size(); ++i)
        if (!(std::fabs(w64[i] - g64[i]) <= tol.atol + tol.rtol * std::fabs(w64[i])) && bad++ < 5)
          ADD_FAILURE() << "element " << i << ": cpu " << w64[i] << ", gpu " << g64[i];
      EXPECT_EQ(bad, 0);
    }
}

TEST(LinalgGpu, ConvMaePatchEmbedding) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes)
    checkConv(device, t, kMaePatchEmbedding);
}

TEST(LinalgGpu, Conv3x3) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes)
    checkConv(device, t, kSame3x3);
  checkConv(device, DType::F32, {{2, 4, 8, 8}, {6, 4, 3, 3}, {2, 6, 4, 4}, {2, 2}, {1, 1, 1, 1}});
  checkConv(device, DType::F32, {{2, 4, 9, 9}, {6, 2, 3, 3}, {2, 6, 9, 9}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 2});
  checkConv(device, DType::F32, {{1, 4, 5, 5}, {4, 1, 3, 3}, {1, 4, 5, 5}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4});
  checkConv(device, DType::F32, {{2, 8, 5, 5}, {4, 8, 1, 1}, {2, 4, 5, 5}});
}

// Padding the legacy API cannot take: explicitly padded copies (and cropped gradients).
TEST(LinalgGpu, ConvExplicitPadding) {
  CPC_REQUIRE_GPU(device);
  for (DType t : {DType::F32, DType::BF16})
    checkConv(device, t, {{1, 3, 7, 7}, {4, 3, 3, 3}, {1, 4, 3, 3}, {2, 2}, {0, 0, 1, 1}}); // SAME, asymmetric
  checkConv(device, DType::F32, {{1, 2, 2, 2}, {3, 2, 3, 3}, {1, 3, 1, 1}, {2, 2}});       // truncated extent
  checkConv(device, DType::F32, {{1, 2, 6, 6}, {2, 2, 3, 3}, {1, 2, 3, 5}, {1, 1}, {-1, 0, 0, 1}}); // negative
  checkConv(device, DType::F32, {{2, 2, 7, 6}, {3, 2, 2, 3}, {2, 3, 4, 2}, {2, 3}, {1, 2, 0, 0}, {1, 2}});
}

TEST(LinalgGpu, ConvEmptySums) {
  CPC_REQUIRE_GPU(device);
  checkConv(device, DType::F32, {{1, 0, 4, 4}, {2, 0, 3, 3}, {1, 2, 2, 2}}); // no input channels: the bias
}
