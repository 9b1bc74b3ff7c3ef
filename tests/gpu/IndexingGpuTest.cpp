//===- IndexingGpuTest.cpp - gather*, gradients, scatter_nd, topk, argsort against the CPU ===//
//
// Every kernel of kernels/cuda/Indexing.cu on every element type it registers. The gradients and
// scatter_nd add in the CPU kernels' order, so even float results must be identical (which also
// shows they are deterministic); block_axes runs as each rank of a 2 x 2 mesh.
//
#include "kernels/Float16.h"
#include "kernels/Kernel.h"
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

/// A tensor of type t with small values (many ties: steps of 0.5 for floats; u8 shifted up to
/// [0, 16]), some NaNs in float tensors when asked.
Tensor smallValues(DType t, std::vector<int64_t> shape, uint64_t seed, bool nans = false) {
  Tensor f = randomF32(std::move(shape), seed, -8, 8);
  for (int64_t i = 0; i < numElements(f.shape); ++i) {
    float &v = f.as<float>()[i];
    v = std::round(v * 2) / 2;
    if (nans && isFloatDType(t) && i % 11 == 3)
      v = NAN;
    if (t == DType::U8)
      v += 8;
  }
  return convertF32(f, t);
}

/// Float values whose sums round (so that the order of additions shows).
Tensor gradients(DType t, std::vector<int64_t> shape, uint64_t seed) {
  Tensor f = randomF32(std::move(shape), seed, -3, 3), out = convertF32(f, t);
  if (t == DType::F64) // values that are not f32's, so that f64 sums round too
    for (int64_t i = 0; i < numElements(f.shape); ++i)
      out.as<double>()[i] = f.as<float>()[i] * 1.0000001;
  return out;
}

/// Indices in [-global, global) as i64 or i32.
Tensor indices(DType t, std::vector<int64_t> shape, int64_t global, uint64_t seed) {
  Tensor f = randomF32(shape, seed, 0, 1), out(t, shape);
  for (int64_t i = 0; i < numElements(shape); ++i) {
    int64_t v = std::min<int64_t>(2 * global - 1, (int64_t)(f.as<float>()[i] * 2 * global)) - global;
    if (t == DType::I64)
      out.as<int64_t>()[i] = v;
    else
      out.as<int32_t>()[i] = (int32_t)v;
  }
  return out;
}

std::vector<int64_t> gatheredShape(const std::vector<int64_t> &data, const std::vector<int64_t> &idx, int64_t axis) {
  std::vector<int64_t> s(data.begin(), data.begin() + axis);
  s.insert(s.end(), idx.begin(), idx.end());
  s.insert(s.end(), data.begin() + axis + 1, data.end());
  return s;
}

/// Runs `op` on the CPU and the GPU as rank `rank` of a dp=2 x tp=2 mesh; results must be identical.
void compareOnRank(Device *device, OpKind op, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                   const nlohmann::json &attrs, int rank) {
  std::vector<int64_t> meshShape = {2, 2};
  std::vector<std::string> meshAxes = {"dp", "tp"};
  auto asRank = [&](kernels::KernelContext &ctx) {
    ctx.rank = rank;
    ctx.meshShape = &meshShape;
    ctx.meshAxes = &meshAxes;
  };
  std::vector<Tensor> cpu = runKernel(nullptr, op, inputs, outputs, attrs, asRank);
  std::vector<Tensor> gpu = runKernel(device, op, inputs, outputs, attrs, asRank);
  for (size_t o = 0; o < outputs.size(); ++o)
    EXPECT_EQ(gpu[o].bytes, cpu[o].bytes) << op << " as rank " << rank << ", output " << o;
}

} // namespace

TEST(IndexingGpu, Gather) {
  CPC_REQUIRE_GPU(device);
  auto gather = [&](DType t, std::vector<int64_t> data, std::vector<int64_t> idx, int64_t axis, DType it) {
    int64_t a = axis < 0 ? axis + (int64_t)data.size() : axis;
    compareWithCpu(device, OpKind::Gather, {smallValues(t, data, 1), indices(it, idx, data[a], 2)},
                   {Tensor(t, gatheredShape(data, idx, a))}, {{"axis", axis}}, 0, 0);
  };
  gather(DType::F32, {1000, 192}, {8, 50}, 0, DType::I64); // an embedding lookup
  gather(DType::F32, {4, 6, 3}, {5}, 1, DType::I32);
  gather(DType::F32, {4, 6, 3}, {2, 2}, -1, DType::I64);
  gather(DType::F32, {7, 3}, {}, 0, DType::I64);
  for (DType t : kEveryType)
    gather(t, {3, 5, 2}, {4}, 1, DType::I64);
}

TEST(IndexingGpu, GatherElements) {
  CPC_REQUIRE_GPU(device);
  auto gatherElements = [&](DType t, std::vector<int64_t> data, std::vector<int64_t> idx, int64_t axis) {
    int64_t a = axis < 0 ? axis + (int64_t)data.size() : axis;
    compareWithCpu(device, OpKind::GatherElements, {smallValues(t, data, 3), indices(DType::I64, idx, data[a], 4)},
                   {Tensor(t, idx)}, {{"axis", axis}}, 0, 0);
  };
  gatherElements(DType::F32, {400, 10}, {400, 1}, 1); // the target logit
  gatherElements(DType::F32, {4, 5, 6}, {3, 7, 2}, 1);
  for (DType t : kEveryType)
    gatherElements(t, {3, 4}, {3, 6}, -1);
}

TEST(IndexingGpu, GatherGradAddsInTheCpuOrder) {
  CPC_REQUIRE_GPU(device);
  auto gatherGrad = [&](DType t, std::vector<int64_t> out, std::vector<int64_t> idx, int64_t axis) {
    int64_t a = axis < 0 ? axis + (int64_t)out.size() : axis;
    compareWithCpu(device, OpKind::GatherGrad,
                   {gradients(t, gatheredShape(out, idx, a), 5), indices(DType::I64, idx, out[a], 6)},
                   {smallValues(t, out, 7)}, {{"axis", axis}, {"dim_size", out[a]}}, 0, 0);
  };
  gatherGrad(DType::F32, {50, 192}, {8, 200}, 0); // many repeats of each row
  gatherGrad(DType::F32, {50000, 64}, {4096}, 0); // a large vocabulary, few rows touched
  gatherGrad(DType::F32, {4, 6, 3}, {40}, 1);
  gatherGrad(DType::F32, {5, 3}, {0}, 0);
  for (DType t : kFloatTypes)
    gatherGrad(t, {3, 5, 2}, {30}, -2);
}

TEST(IndexingGpu, GatherElementsGradAddsInTheCpuOrder) {
  CPC_REQUIRE_GPU(device);
  auto grad = [&](DType t, std::vector<int64_t> out, std::vector<int64_t> idx, int64_t axis) {
    int64_t a = axis < 0 ? axis + (int64_t)out.size() : axis;
    compareWithCpu(device, OpKind::GatherElementsGrad, {gradients(t, idx, 8), indices(DType::I32, idx, out[a], 9)},
                   {smallValues(t, out, 10)}, {{"axis", axis}}, 0, 0);
  };
  grad(DType::F32, {400, 10}, {400, 1}, 1);
  grad(DType::F32, {4, 5, 6}, {3, 30, 2}, 1);
  for (DType t : kFloatTypes)
    grad(t, {3, 4}, {3, 20}, -1);
}

TEST(IndexingGpu, BlockAxesOnEveryRank) {
  CPC_REQUIRE_GPU(device);
  for (int rank = 0; rank < 4; ++rank) {
    Tensor ids = indices(DType::I64, {9}, 12, 11), table = smallValues(DType::F32, {6, 4}, 12);
    compareOnRank(device, OpKind::Gather, {table, ids}, {Tensor(DType::F32, {9, 4})},
                  {{"axis", 0}, {"block_axes", {"tp"}}}, rank);
    compareOnRank(device, OpKind::GatherGrad, {gradients(DType::F32, {9, 4}, 13), ids}, {Tensor(DType::F32, {6, 4})},
                  {{"axis", 0}, {"dim_size", 6}, {"block_axes", {"tp"}}}, rank);
    Tensor target = indices(DType::I64, {3, 5}, 8, 14);
    compareOnRank(device, OpKind::GatherElements, {smallValues(DType::F32, {3, 4}, 15), target},
                  {Tensor(DType::F32, {3, 5})}, {{"axis", 1}, {"block_axes", {"tp"}}}, rank);
    compareOnRank(device, OpKind::GatherElementsGrad, {gradients(DType::F32, {3, 5}, 16), target},
                  {Tensor(DType::F32, {3, 4})}, {{"axis", 1}, {"block_axes", {"tp"}}}, rank);
  }
}

TEST(IndexingGpu, ScatterNDKeepsTheCpuOrderOfDuplicates) {
  CPC_REQUIRE_GPU(device);
  for (const char *reduction : {"none", "add", "mul", "max", "min"})
    for (DType t : kEveryType) {
      // Slices of [3, 2] at 20 tuples over 4 rows; elements at 30 tuples over [4, 3].
      compareWithCpu(device, OpKind::ScatterND,
                     {smallValues(t, {4, 3, 2}, 17, true), indices(DType::I64, {20, 1}, 4, 18), smallValues(t, {20, 3, 2}, 19, true)},
                     {Tensor(t, {4, 3, 2})}, {{"reduction", reduction}}, 0, 0);
      compareWithCpu(device, OpKind::ScatterND,
                     {smallValues(t, {4, 3}, 20), indices(DType::I32, {6, 5, 2}, 3, 21), smallValues(t, {6, 5}, 22)},
                     {Tensor(t, {4, 3})}, {{"reduction", reduction}}, 0, 0);
    }
}

TEST(IndexingGpu, TopK) {
  CPC_REQUIRE_GPU(device);
  auto topk = [&](DType t, std::vector<int64_t> shape, int64_t axis, int64_t k, bool largest) {
    std::vector<int64_t> out = shape;
    out[axis < 0 ? axis + shape.size() : axis] = k;
    compareWithCpu(device, OpKind::TopK, {smallValues(t, shape, 23, true)}, {Tensor(t, out), Tensor(DType::I64, out)},
                   {{"axis", axis}, {"k", k}, {"largest", largest}}, 0, 0);
  };
  for (bool largest : {true, false}) {
    topk(DType::F32, {8, 1000}, 1, 5, largest);
    topk(DType::F32, {6, 33, 4}, 1, 33, largest);
    topk(DType::F32, {17, 3}, 0, 4, largest);
    topk(DType::F32, {2, 4096}, 1, 3, largest);
    topk(DType::F64, {2, 4096}, 1, 10, largest);
    for (DType t : kEveryType)
      topk(t, {3, 50}, -1, 7, largest);
  }
}

TEST(IndexingGpu, ArgsortIsStableWithNaNs) {
  CPC_REQUIRE_GPU(device);
  auto argsort = [&](DType t, std::vector<int64_t> shape, int64_t axis, bool descending) {
    compareWithCpu(device, OpKind::ArgSort, {smallValues(t, shape, 24, true)}, {Tensor(DType::I64, shape)},
                   {{"axis", axis}, {"descending", descending}}, 0, 0);
  };
  for (bool descending : {false, true}) {
    argsort(DType::F32, {5, 100}, 1, descending);
    argsort(DType::F32, {40, 3}, 0, descending);
    argsort(DType::F64, {2, 3000}, 1, descending);
    for (DType t : kEveryType)
      argsort(t, {4, 37}, 1, descending);
  }
}

TEST(IndexingGpu, RowsTooLongToSortFailClearly) {
  CPC_REQUIRE_GPU(device);
  Tensor in = smallValues(DType::F32, {1, 5000}, 25);
  Allocator &memory = device->allocator(MemorySpace::Device);
  void *src = memory.allocate(in.bytes.size()), *dst = memory.allocate(5000 * 8);
  kernels::KernelContext ctx;
  ctx.op = OpKind::ArgSort;
  ctx.device = device;
  ctx.inputs = {TensorRef{src, DType::F32, {1, 5000}}};
  ctx.outputs = {TensorRef{dst, DType::I64, {1, 5000}}};
  ctx.setAttrs({{"axis", 1}});
  kernels::KernelFn fn = kernelRegistry().find(OpKind::ArgSort, DeviceKind::Cuda, DType::I64);
  ASSERT_TRUE(fn);
  EXPECT_THROW(fn(ctx), RuntimeError);
  memory.deallocate(src);
  memory.deallocate(dst);
}
