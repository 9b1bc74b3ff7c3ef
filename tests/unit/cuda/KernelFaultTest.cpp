//===- KernelFaultTest.cpp - faults the GPU kernels record, on the host ----===//
//
// Tests that the GPU kernels' index and division arithmetic records the fault where the CPU
// kernel fails its step, and that the record reads as the CPU kernel's message: each case runs
// the CPU kernel on one bad index (or a zero divisor), replays the CUDA kernel's mapping over
// the same operands with a fault sink on a host record, and compares the two messages.
//
#include "kernels/KernelFault.h"
#include "kernels/cuda/ElementwiseMath.h"
#include "kernels/cuda/IndexingMath.h"
#include "tests/unit/cuda/CudaTestUtil.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

using namespace cpc;
using namespace cpc::kernels;
using namespace cpc::kernels::cuda;
using namespace cpc::cudatest;

namespace {

/// The CPU kernel's failure on these operands, without the op's name ("cpc.gather: ").
std::string cpuFailure(OpKind op, const std::vector<HostTensor *> &ins, HostTensor &out,
                       const nlohmann::json &attrs) {
  KernelContext ctx = hostContext(op, ins, {&out}, attrs);
  try {
    runCpuKernel(ctx);
  } catch (const RuntimeError &e) {
    std::string message = e.what();
    EXPECT_EQ(message.rfind(std::string(opName(op)) + ": ", 0), 0u) << message;
    return message.substr(std::string(opName(op)).size() + 2);
  }
  ADD_FAILURE() << op << ": the CPU kernel did not fail";
  return "";
}

HostTensor indicesOf(std::vector<int64_t> values) {
  HostTensor t(DType::I64, {(int64_t)values.size()});
  for (size_t i = 0; i < values.size(); ++i)
    t.setValue((int64_t)i, double(values[i]));
  return t;
}

TEST(KernelFault, TheFirstFaultWinsAndTakingItClearsTheRecord) {
  HostFaultRecord record;
  record.sink(7).report(FaultKind::IndexOutOfRange, 9, 4, 1);
  record.sink(8).report(FaultKind::IntegerDivisionByZero);
  EXPECT_EQ(record.fault.kind, int32_t(FaultKind::IndexOutOfRange));
  EXPECT_EQ(record.fault.site, 7);
  EXPECT_EQ(describeFault(record.fault), "index 9 is out of range for dim 1 of size 4");
  FaultSink{}.report(FaultKind::IndexOutOfRange, 1, 1, 0); // no record: ignored
}

TEST(KernelFault, RacingThreadsLeaveOneWholeRecord) {
  for (int round = 0; round < 20; ++round) {
    HostFaultRecord record;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] { record.sink(t).report(FaultKind::IndexOutOfRange, 100 + t, 10 + t, t); });
    for (std::thread &t : threads)
      t.join();
    int64_t winner = record.fault.site;
    ASSERT_GE(winner, 0);
    ASSERT_LT(winner, 4);
    EXPECT_EQ(record.fault.value, 100 + winner);
    EXPECT_EQ(record.fault.size, 10 + winner);
    EXPECT_EQ(record.fault.dim, winner);
  }
}

TEST(KernelFault, GatherReportsTheCpuMessage) {
  HostTensor data(DType::F32, {3, 4}), out(DType::F32, {3, 2});
  HostTensor indices = indicesOf({1, 9});
  std::string cpu = cpuFailure(OpKind::Gather, {&data, &indices}, out, {{"axis", 1}});
  HostFaultRecord record;
  IndexRange r{0, 4, 4};
  for (int64_t i = 0; i < indices.numel(); ++i)
    checkedLocalIndex(int64_t(indices.value(i)), r, record.sink(), 1);
  EXPECT_EQ(describeFault(record.fault), cpu);
}

TEST(KernelFault, GatherElementsReportsTheCpuMessage) {
  HostTensor data(DType::F32, {2, 3}), out(DType::F32, {2, 3});
  HostTensor indices(DType::I64, {2, 3});
  for (int64_t i = 0; i < 6; ++i)
    indices.setValue(i, i == 4 ? -3 : 0); // -3 is out of range for the 2 rows of axis 0
  std::string cpu = cpuFailure(OpKind::GatherElements, {&data, &indices}, out, {{"axis", 0}});
  HostFaultRecord record;
  for (int64_t e = 0; e < indices.numel(); ++e)
    checkedLocalIndex(int64_t(indices.value(e)), IndexRange{0, 2, 2}, record.sink(), 0);
  EXPECT_EQ(describeFault(record.fault), cpu);
}

TEST(KernelFault, GatherGradientsReportTheCpuMessage) {
  HostTensor grad(DType::F32, {2}), out(DType::F32, {5});
  HostTensor indices = indicesOf({0, -6});
  std::string cpu = cpuFailure(OpKind::GatherGrad, {&grad, &indices}, out, {{"axis", 0}, {"dim_size", 5}});
  HostFaultRecord record;
  for (int64_t i = 0; i < indices.numel(); ++i)
    targetKey(checkedLocalIndex(int64_t(indices.value(i)), IndexRange{0, 5, 5}, record.sink(), -1), 5);
  EXPECT_EQ(describeFault(record.fault), cpu);

  HostTensor grad2(DType::F32, {2}), out2(DType::F32, {3});
  HostTensor indices2 = indicesOf({3, 0});
  std::string cpu2 = cpuFailure(OpKind::GatherElementsGrad, {&grad2, &indices2}, out2, {{"axis", 0}});
  HostFaultRecord record2;
  for (int64_t i = 0; i < indices2.numel(); ++i)
    checkedLocalIndex(int64_t(indices2.value(i)), IndexRange{0, 3, 3}, record2.sink(), -1);
  EXPECT_EQ(describeFault(record2.fault), cpu2);
}

TEST(KernelFault, ScatterNDReportsTheCpuMessage) {
  HostTensor data(DType::F32, {4, 3}), updates(DType::F32, {2, 3}), out(DType::F32, {4, 3});
  HostTensor indices(DType::I64, {2, 1});
  indices.setValue(0, 1);
  indices.setValue(1, 4);
  std::string cpu = cpuFailure(OpKind::ScatterND, {&data, &indices, &updates}, out, nlohmann::json::object());
  ScatterDims dims;
  dims.q = 1;
  dims.shape[0] = 4;
  HostFaultRecord record;
  const int64_t *tuples = indices.as<int64_t>();
  EXPECT_EQ(scatterSlot(dims, tuples, record.sink()), 1);
  EXPECT_EQ(scatterSlot(dims, tuples + 1, record.sink()), kOutOfRange);
  EXPECT_EQ(describeFault(record.fault), cpu);
}

TEST(KernelFault, IntegerDivisionByZeroReportsTheCpuMessage) {
  HostTensor a(DType::I32, {2}), b(DType::I32, {2}), out(DType::I32, {2});
  a.setValue(0, 6), a.setValue(1, 7), b.setValue(0, 3), b.setValue(1, 0);
  std::string cpu = cpuFailure(OpKind::Div, {&a, &b}, out, nlohmann::json::object());
  HostFaultRecord record;
  DivOp div{record.sink()};
  EXPECT_EQ(div(int32_t(6), int32_t(3)), 2);
  EXPECT_EQ(record.fault.kind, 0);
  EXPECT_EQ(div(int32_t(7), int32_t(0)), 0);
  EXPECT_EQ(describeFault(record.fault), cpu);
  HostFaultRecord untouched;
  DivOp floats{untouched.sink()};
  EXPECT_TRUE(std::isinf(floats(1.0f, 0.0f))); // a float divisor of zero is no fault
  EXPECT_EQ(untouched.fault.kind, 0);
}

} // namespace
