//===- MovementGpuTest.cpp - transpose, slice, concat, broadcast, pad against the CPU ===//
//
// Every kernel of kernels/cuda/Movement.cu on every element type: tiled and generic transposes,
// widened and unaligned words, negative slice steps, concat along every axis, numpy broadcasts
// and pads with interior padding and values of every kind. All results must be identical.
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

/// A tensor of type t with deterministic values (integers in [-100, 100), i1 0/1).
Tensor values(DType t, std::vector<int64_t> shape, uint64_t seed) {
  return filled(t, std::move(shape), seed, -100, 100);
}

void exact(Device *device, OpKind op, std::vector<Tensor> inputs, Tensor out, const nlohmann::json &attrs) {
  compareWithCpu(device, op, std::move(inputs), {std::move(out)}, attrs, 0, 0);
}

void transpose(Device *device, DType t, std::vector<int64_t> shape, std::vector<int64_t> perm) {
  std::vector<int64_t> outShape;
  for (int64_t p : perm)
    outShape.push_back(shape[p < 0 ? p + (int64_t)shape.size() : p]);
  exact(device, OpKind::Transpose, {values(t, shape, 1)}, Tensor(t, outShape), {{"permutation", perm}});
}

} // namespace

TEST(MovementGpu, Transpose) {
  CPC_REQUIRE_GPU(device);
  transpose(device, DType::F32, {8, 50, 192}, {0, 2, 1});     // tiles with ragged edges
  transpose(device, DType::F32, {1024, 768}, {1, 0});
  transpose(device, DType::F32, {8, 50, 3, 64}, {0, 2, 1, 3}); // rows of 64 floats, 16-byte words
  transpose(device, DType::F32, {3, 4, 5, 6}, {3, 2, 1, 0});
  transpose(device, DType::F32, {3, 4, 5}, {-1, 0, -2});
  transpose(device, DType::F32, {}, {});
  for (DType t : kEveryType) {
    transpose(device, t, {33, 65}, {1, 0});
    transpose(device, t, {2, 7, 5, 3}, {1, 0, 3, 2});
    transpose(device, t, {4, 6, 8}, {1, 0, 2});
  }
}

TEST(MovementGpu, Slice) {
  CPC_REQUIRE_GPU(device);
  auto slice = [&](DType t, std::vector<int64_t> shape, std::vector<int64_t> starts, std::vector<int64_t> limits,
                   std::vector<int64_t> steps, std::vector<int64_t> outShape) {
    exact(device, OpKind::Slice, {values(t, shape, 2)}, Tensor(t, outShape),
          {{"starts", starts}, {"limits", limits}, {"strides", steps}});
  };
  slice(DType::F32, {8, 51, 192}, {0, 1, 0}, {8, 51, 192}, {1, 1, 1}, {8, 50, 192}); // drop the cls token
  slice(DType::F32, {8, 51, 192}, {0, 0, 1}, {8, 51, 192}, {1, 1, 1}, {8, 51, 191}); // unaligned rows
  slice(DType::F32, {10, 12}, {9, -1}, {0, 0}, {-1, -2}, {9, 6});                    // negative steps
  slice(DType::F32, {5, 6}, {2, 0}, {2, 6}, {1, 1}, {0, 6});                          // empty
  for (DType t : kEveryType) {
    slice(t, {4, 9, 7}, {3, 1, 6}, {0, 9, 0}, {-1, 2, -3}, {3, 4, 3});
    slice(t, {6, 32}, {1, 0}, {5, 32}, {1, 1}, {4, 32});
  }
}

TEST(MovementGpu, Broadcast) {
  CPC_REQUIRE_GPU(device);
  exact(device, OpKind::Broadcast, {values(DType::F32, {1, 192}, 3)}, Tensor(DType::F32, {400, 192}), nlohmann::json::object());
  exact(device, OpKind::Broadcast, {values(DType::F32, {192}, 3)}, Tensor(DType::F32, {8, 50, 192}), nlohmann::json::object());
  exact(device, OpKind::Broadcast, {values(DType::F32, {}, 3)}, Tensor(DType::F32, {4, 4}), nlohmann::json::object());
  for (DType t : kEveryType)
    exact(device, OpKind::Broadcast, {values(t, {5, 1, 3}, 4)}, Tensor(t, {2, 5, 4, 3}), nlohmann::json::object());
}

TEST(MovementGpu, Concat) {
  CPC_REQUIRE_GPU(device);
  exact(device, OpKind::Concat, {values(DType::F32, {8, 1, 192}, 5), values(DType::F32, {8, 50, 192}, 6)},
        Tensor(DType::F32, {8, 51, 192}), {{"axis", 1}});
  exact(device, OpKind::Concat,
        {values(DType::F32, {2, 3}, 7), values(DType::F32, {2, 0}, 8), values(DType::F32, {2, 5}, 9)},
        Tensor(DType::F32, {2, 8}), {{"axis", -1}});
  for (DType t : kEveryType)
    for (int64_t axis : {0, 1, 2}) {
      std::vector<int64_t> a = {2, 3, 4}, b = {2, 3, 4}, out = {2, 3, 4};
      b[axis] = 5;
      out[axis] = a[axis] + 5;
      exact(device, OpKind::Concat, {values(t, a, 10), values(t, b, 11)}, Tensor(t, out), {{"axis", axis}});
    }
}

TEST(MovementGpu, Pad) {
  CPC_REQUIRE_GPU(device);
  auto pad = [&](DType t, std::vector<int64_t> shape, std::vector<int64_t> low, std::vector<int64_t> high,
                 std::vector<int64_t> interior, double value) {
    std::vector<int64_t> outShape(shape.size());
    for (size_t d = 0; d < shape.size(); ++d)
      outShape[d] = low[d] + high[d] + shape[d] + std::max<int64_t>(shape[d] - 1, 0) * interior[d];
    exact(device, OpKind::Pad, {values(t, shape, 12)}, Tensor(t, outShape),
          {{"low_padding", low}, {"high_padding", high}, {"interior_padding", interior}, {"value", value}});
  };
  pad(DType::F32, {8, 3, 32, 32}, {0, 0, 1, 1}, {0, 0, 1, 1}, {0, 0, 0, 0}, 0.0); // conv padding
  pad(DType::F32, {2, 3, 4}, {0, 1, 3}, {1, 0, 2}, {2, 0, 1}, -1.5);
  pad(DType::F32, {0, 3}, {1, 1}, {1, 0}, {0, 0}, 7.0);
  for (DType t : kEveryType)
    for (double v : {0.0, 2.5, -3.0, double(INFINITY), -double(INFINITY), 300.0, 1e10, 1 + 0x1p-11 + 0x1p-40})
      pad(t, {3, 5}, {1, 0}, {2, 3}, {1, 2}, v);
}
