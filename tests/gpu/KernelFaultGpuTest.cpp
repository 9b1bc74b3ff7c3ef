//===- KernelFaultGpuTest.cpp - faults the CUDA kernels record, on a GPU ----===//
//
// Tests that a CUDA kernel given an index out of range (or an integer divisor of zero) records
// the fault where the CPU kernel fails, that the device hands it over once with the CPU kernel's
// words (kernels/KernelFault.h), and that the kernels of good operands record nothing.
//
#include "kernels/KernelFault.h"
#include "tests/gpu/GpuTestUtil.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace cpc;
using namespace cpc::gputest;

namespace {

Tensor i64s(std::vector<int64_t> shape, std::vector<int64_t> values) {
  Tensor t(DType::I64, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.as<int64_t>()[i] = values[i];
  return t;
}

/// Runs `op` on the CPU, which must fail, and on the GPU, whose recorded fault must read as the
/// CPU's failure.
void expectSameFault(Device *device, OpKind op, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                     const nlohmann::json &attrs) {
  std::string cpu;
  try {
    runKernel(nullptr, op, inputs, outputs, attrs);
    ADD_FAILURE() << op << ": the CPU kernel did not fail";
  } catch (const RuntimeError &e) {
    cpu = e.what();
  }
  ASSERT_EQ(device->takeFault().kind, 0) << "a fault left over before " << op;
  device->setFaultSite(42);
  runKernel(device, op, inputs, outputs, attrs); // synchronizes
  kernels::KernelFault fault = device->takeFault();
  EXPECT_EQ(std::string(opName(op)) + ": " + kernels::describeFault(fault), cpu);
  EXPECT_EQ(fault.site, 42);
  EXPECT_EQ(device->takeFault().kind, 0) << "taken twice";
}

} // namespace

TEST(KernelFaultGpu, IndicesOutOfRangeReadAsOnTheCpu) {
  CPC_REQUIRE_GPU(device);
  Tensor data = randomF32({3, 4}, 1);
  expectSameFault(device, OpKind::Gather, {data, i64s({2}, {1, 9})}, {Tensor(DType::F32, {3, 2})}, {{"axis", 1}});
  expectSameFault(device, OpKind::GatherElements, {data, i64s({1, 4}, {0, -4, 1, 2})}, {Tensor(DType::F32, {1, 4})},
                  {{"axis", 0}});
  expectSameFault(device, OpKind::GatherGrad, {randomF32({2}, 2), i64s({2}, {0, -6})}, {Tensor(DType::F32, {5})},
                  {{"axis", 0}, {"dim_size", 5}});
  expectSameFault(device, OpKind::GatherElementsGrad, {randomF32({2}, 3), i64s({2}, {3, 0})},
                  {Tensor(DType::F32, {3})}, {{"axis", 0}});
  expectSameFault(device, OpKind::ScatterND, {randomF32({4, 3}, 4), i64s({2, 1}, {1, 4}), randomF32({2, 3}, 5)},
                  {Tensor(DType::F32, {4, 3})}, nlohmann::json::object());
}

TEST(KernelFaultGpu, IntegerDivisionByZeroReadsAsOnTheCpu) {
  CPC_REQUIRE_GPU(device);
  Tensor a(DType::I32, {3}), b(DType::I32, {3});
  for (int i = 0; i < 3; ++i)
    a.as<int32_t>()[i] = 7 + i, b.as<int32_t>()[i] = i == 1 ? 0 : 2;
  expectSameFault(device, OpKind::Div, {a, b}, {Tensor(DType::I32, {3})}, nlohmann::json::object());
}

TEST(KernelFaultGpu, GoodOperandsRecordNothing) {
  CPC_REQUIRE_GPU(device);
  runKernel(device, OpKind::Gather, {randomF32({3, 4}, 1), i64s({2}, {1, -4})}, {Tensor(DType::F32, {3, 2})},
            {{"axis", 1}});
  Tensor a(DType::I64, {2}), b(DType::I64, {2});
  a.as<int64_t>()[0] = 5, a.as<int64_t>()[1] = -5, b.as<int64_t>()[0] = 2, b.as<int64_t>()[1] = -1;
  runKernel(device, OpKind::Div, {a, b}, {Tensor(DType::I64, {2})}, nlohmann::json::object());
  EXPECT_EQ(device->takeFault().kind, 0);
}
