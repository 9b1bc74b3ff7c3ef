//===- ReductionGpuTest.cpp - the reduction CUDA kernels against the CPU's ===//
//
// reduce_{sum,mean,prod,max,min} on every element type they register, over rows (the reduced
// range innermost), columns, interleaved kept and reduced dims, everything, nothing, an empty
// range, and long ranges that the kernel slices across blocks; f32 within 1e-5 relative (the
// kernel, like the CPU, sums floats in double), integers and max/min exactly.
//
#include "kernels/Float16.h"
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

struct Case {
  std::vector<int64_t> shape, axes;
  bool keepdims;
};

const std::vector<Case> kCases = {
    {{128, 1000}, {1}, false},        // rows
    {{1000, 128}, {0}, false},        // columns
    {{16, 24, 40}, {1}, true},        // middle, keepdims
    {{6, 7, 8, 9}, {0, 2}, false},    // two reduced runs
    {{6, 7, 8}, {0, 1, 2}, false},    // everything
    {{6, 7}, {}, false},              // nothing
    {{5, 0, 3}, {1}, false},          // empty reduced range
    {{1, 1 << 22}, {1}, false},       // one long row: sliced
    {{1 << 16, 64}, {0}, false},      // long columns: sliced
    {{4, 3, 50000}, {0, 2}, true},    // two runs, sliced
};

std::vector<int64_t> outShapeOf(const Case &c) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < (int64_t)c.shape.size(); ++d) {
    bool reduced = std::find(c.axes.begin(), c.axes.end(), d) != c.axes.end();
    if (!reduced || c.keepdims)
      out.push_back(reduced ? 1 : c.shape[d]);
  }
  return out;
}

void reduce(Device *device, OpKind op, DType t, float lo, float hi, double rtol, bool small = false) {
  for (const Case &c : kCases) {
    if (small && numElements(c.shape) > 100000)
      continue;
    SCOPED_TRACE(std::string(opName(op)) + " " + dtypeName(t) + " " + shapeString(c.shape));
    compareWithCpu(device, op, {filled(t, c.shape, 1, lo, hi)}, {Tensor(t, outShapeOf(c))},
                   {{"axes", c.axes}, {"keepdims", c.keepdims}}, rtol, 1e-6);
  }
}

TEST(ReductionGpu, SumAndMeanOfFloats) {
  CPC_REQUIRE_GPU(device);
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceSumSquares}) {
    reduce(device, op, DType::F32, -1, 1, 1e-5);
    reduce(device, op, DType::F64, -1, 1, 1e-12);
    reduce(device, op, DType::F16, -1, 1, 2e-3);
    reduce(device, op, DType::BF16, -1, 1, 1.6e-2);
  }
}

TEST(ReductionGpu, SumOfIntegersWraps) {
  CPC_REQUIRE_GPU(device);
  for (DType t : {DType::I64, DType::I32, DType::I16, DType::I8, DType::U8})
    reduce(device, OpKind::ReduceSum, t, -100, 100, 0);
}

TEST(ReductionGpu, MaxAndMin) {
  CPC_REQUIRE_GPU(device);
  for (OpKind op : {OpKind::ReduceMax, OpKind::ReduceMin})
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::I16, DType::I8,
                    DType::U8, DType::I1})
      reduce(device, op, t, -100, 100, 0);
}

// Products over the smaller cases (long ones leave the float range).
TEST(ReductionGpu, Prod) {
  CPC_REQUIRE_GPU(device);
  reduce(device, OpKind::ReduceProd, DType::F32, 0.9f, 1.1f, 1e-5, true);
  reduce(device, OpKind::ReduceProd, DType::F64, 0.9f, 1.1f, 1e-12, true);
  reduce(device, OpKind::ReduceProd, DType::BF16, 0.9f, 1.1f, 1.6e-2, true);
  reduce(device, OpKind::ReduceProd, DType::I64, -3, 3, 0, true);
  reduce(device, OpKind::ReduceProd, DType::I32, -3, 3, 0, true);
}

} // namespace
