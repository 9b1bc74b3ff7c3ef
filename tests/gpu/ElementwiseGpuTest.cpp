//===- ElementwiseGpuTest.cpp - the elementwise CUDA kernels against the CPU's ===//
//
// Every op of kernels/cuda/Elementwise.cu on every element type it registers: unary ops,
// gelu(_grad), casts between every pair of types, broadcasting binary ops (flat, 32-bit and
// strided geometries), compares, logical ops and where; f32 within 1e-5 relative, 16-bit floats
// within a unit of their last place, integers and i1 exactly.
//
#include "kernels/Float16.h"
#include "kernels/Kernel.h"
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

/// The relative tolerance of a float type's results (f32: the 1e-5 the kernels promise).
double rtolOf(DType t) {
  switch (t) {
  case DType::F64: return 1e-12;
  case DType::F16: return 2e-3;
  case DType::BF16: return 1.6e-2;
  default: return 1e-5;
  }
}

const DType kInts[] = {DType::I64, DType::I32, DType::I16, DType::I8, DType::U8};

void unary(Device *device, OpKind op, DType t, float lo, float hi,
           const nlohmann::json &attrs = nlohmann::json::object(), std::vector<int64_t> shape = {33, 517}) {
  SCOPED_TRACE(std::string(opName(op)) + " " + dtypeName(t));
  compareWithCpu(device, op, {filled(t, shape, 1, lo, hi)}, {Tensor(t, shape)}, attrs, rtolOf(t), 1e-6);
}

// Tests each float unary op on f32, f64, f16 and bf16 (a size that leaves a partial block).
TEST(ElementwiseGpu, FloatUnaryOps) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes) {
    for (OpKind op : {OpKind::Exp, OpKind::Erf, OpKind::Tanh, OpKind::Sigmoid, OpKind::Relu, OpKind::Neg, OpKind::Abs,
                           OpKind::Reciprocal, OpKind::Gelu})
      unary(device, op, t, -4, 4);
    for (OpKind op : {OpKind::Log, OpKind::Sqrt, OpKind::Rsqrt})
      unary(device, op, t, 0.01f, 40);
    unary(device, OpKind::Gelu, t, -4, 4, {{"approximate", "tanh"}});
  }
}

// Tests neg and abs on the integers (wrapping at the ends of i8), and not on i1.
TEST(ElementwiseGpu, IntegerAndBoolUnaryOps) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kInts) {
    unary(device, OpKind::Neg, t, -200, 200);
    unary(device, OpKind::Abs, t, -200, 200);
  }
  unary(device, OpKind::Not, DType::I1, -1, 1);
}

// Tests gelu_grad in both forms.
TEST(ElementwiseGpu, GeluGrad) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes)
    for (const char *form : {"none", "tanh"}) {
      SCOPED_TRACE(std::string(dtypeName(t)) + " " + form);
      compareWithCpu(device, OpKind::GeluGrad, {filled(t, {65, 129}, 2, -5, 5), filled(t, {65, 129}, 3)},
                     {Tensor(t, {65, 129})}, {{"approximate", form}}, rtolOf(t), 1e-6);
    }
}

// Tests cast between every pair of element types: truncation, wrapping through int64,
// `!= 0` to i1, 16-bit floats rounded once.
TEST(ElementwiseGpu, CastEveryPair) {
  CPC_REQUIRE_GPU(device);
  for (DType from : kEveryType)
    for (DType to : kEveryType) {
      SCOPED_TRACE(std::string(dtypeName(from)) + " -> " + dtypeName(to));
      compareWithCpu(device, OpKind::Cast, {filled(from, {1000}, 4, -300, 300)}, {Tensor(to, {1000})},
                     nlohmann::json::object(), rtolOf(to), 0);
    }
}

struct Broadcast {
  std::vector<int64_t> out, a, b;
};

// Equal shapes, a scalar, a bias, both operands broadcasting, and a rank-5 strided geometry.
const std::vector<Broadcast> kBroadcasts = {
    {{64, 300}, {64, 300}, {64, 300}},
    {{64, 300}, {}, {64, 300}},
    {{8, 16, 96}, {8, 16, 96}, {96}},
    {{8, 16, 96}, {16, 1}, {8, 1, 96}},
    {{3, 4, 5, 6, 7}, {3, 1, 5, 1, 7}, {4, 1, 6, 1}},
};

void binary(Device *device, OpKind op, DType t, DType result, float lo = -10, float hi = 10) {
  for (const Broadcast &b : kBroadcasts) {
    SCOPED_TRACE(std::string(opName(op)) + " " + dtypeName(t) + " " + shapeString(b.out));
    Tensor rhs = filled(t, b.b, 6, lo, hi);
    if (op == OpKind::Div && !isFloatDType(t)) // integer division by zero fails on the CPU
      for (size_t i = 0; i < rhs.bytes.size(); i += dtypeSize(t))
        if (std::all_of(rhs.bytes.begin() + i, rhs.bytes.begin() + i + dtypeSize(t), [](uint8_t x) { return x == 0; }))
          rhs.bytes[i] = 3;
    compareWithCpu(device, op, {filled(t, b.a, 5, lo, hi), rhs}, {Tensor(result, b.out)}, nlohmann::json::object(),
                   rtolOf(t), 1e-6);
  }
}

// Tests the arithmetic binary ops on every type they accept, over the broadcasts above.
TEST(ElementwiseGpu, BinaryOps) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kFloatTypes)
    for (OpKind op : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Max, OpKind::Min})
      binary(device, op, t, t);
  for (DType t : kFloatTypes)
    binary(device, OpKind::Pow, t, t, 0.1f, 3);
  for (DType t : kInts)
    for (OpKind op : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Div, OpKind::Max, OpKind::Min})
      binary(device, op, t, t, -100, 100);
  binary(device, OpKind::Max, DType::I1, DType::I1);
  binary(device, OpKind::Min, DType::I1, DType::I1);
}

// Tests the compares (i1 results, on values with ties) and and/or.
TEST(ElementwiseGpu, CompareAndLogicalOps) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kEveryType)
    for (OpKind op : {OpKind::Equal, OpKind::Less, OpKind::LessEqual, OpKind::Greater, OpKind::GreaterEqual})
      binary(device, op, t, DType::I1, -3, 3);
  binary(device, OpKind::And, DType::I1, DType::I1);
  binary(device, OpKind::Or, DType::I1, DType::I1);
}

// Tests where with a broadcasting condition and branches on every type.
TEST(ElementwiseGpu, Where) {
  CPC_REQUIRE_GPU(device);
  for (DType t : kEveryType) {
    SCOPED_TRACE(dtypeName(t));
    compareWithCpu(device, OpKind::Where, {filled(DType::I1, {16, 1}, 7), filled(t, {4, 16, 33}, 8, -9, 9), filled(t, {33}, 9, -9, 9)},
                   {Tensor(t, {4, 16, 33})}, nlohmann::json::object(), 0, 0);
    compareWithCpu(device, OpKind::Where, {filled(DType::I1, {300}, 7), filled(t, {300}, 8, -9, 9), filled(t, {300}, 9, -9, 9)},
                   {Tensor(t, {300})}, nlohmann::json::object(), 0, 0);
  }
}

// Tests a large broadcast (many blocks per SM in the grid-stride loop).
TEST(ElementwiseGpu, LargeBroadcast) {
  CPC_REQUIRE_GPU(device);
  compareWithCpu(device, OpKind::Add, {filled(DType::F32, {512, 1, 4096}, 10), filled(DType::F32, {1, 7, 4096}, 11)},
                 {Tensor(DType::F32, {512, 7, 4096})});
}

// Tests an in-place narrowing cast (f32 -> bf16 into its own buffer), which reads from a copy.
TEST(ElementwiseGpu, InPlaceNarrowingCast) {
  CPC_REQUIRE_GPU(device);
  Tensor x = filled(DType::F32, {10000}, 12, -100, 100), want(DType::BF16, {10000});
  for (int64_t i = 0; i < 10000; ++i)
    want.as<uint16_t>()[i] = floatToBF16(x.as<float>()[i]);
  Allocator &memory = device->allocator(MemorySpace::Device);
  void *buffer = memory.allocate(x.bytes.size());
  device->copy(buffer, MemorySpace::Device, x.bytes.data(), MemorySpace::Host, x.bytes.size());
  kernels::KernelContext ctx;
  ctx.op = OpKind::Cast;
  ctx.device = device;
  ctx.inputs = {TensorRef{buffer, DType::F32, {10000}}};
  ctx.outputs = {TensorRef{buffer, DType::BF16, {10000}}};
  kernels::KernelFn fn = kernelRegistry().find(OpKind::Cast, DeviceKind::Cuda, DType::BF16);
  ASSERT_TRUE(fn);
  fn(ctx);
  Tensor got(DType::BF16, {10000});
  device->copy(got.bytes.data(), MemorySpace::Host, buffer, MemorySpace::Device, got.bytes.size());
  memory.deallocate(buffer);
  EXPECT_EQ(got.bytes, want.bytes);
}

} // namespace
