//===- KernelCoverageTest.cpp - every op a plan can hold has its kernels ------===//
//
// Walks every op the cpc dialect registers and checks that the runtime can run it: a CPU kernel,
// and a CUDA kernel when the GPU backend is built, or a collective the communicator runs on every
// device, or an entry below saying why no kernel is needed. A kernel registration removed (or an
// op added without kernels) fails here, before a plan meets it at run time (issue 30).
//
#include "dialects/cpc/CpcDialect.h"
#include "runtime/CollectiveKernels.h"
#include "runtime/Device.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace cpc;

/// Ops that never reach a kernel, and why.
const std::map<std::string, std::string> kNoKernel = {
    {"cpc.constant", "the plan holds its value as a buffer's initial contents"},
    {"cpc.parameter", "a variable of the plan, bound to its buffer by the plan builder"},
    {"cpc.state", "a variable of the plan (optimizer and accumulator state), bound by role"},
    {"cpc.mesh", "a symbol naming the device mesh; no value"},
    {"cpc.shard", "a sharding annotation that cpc-partition replaces by local shapes and collectives"},
};

/// Steps the plan builder writes that are no op of the dialect, and why.
const std::map<std::string, std::string> kPlanOnly = {
    {"cpc.copy", "keeps a variable's value a function returns before an assign overwrites it"},
};

/// Ops with a CPU kernel and, so far, no CUDA kernel, and why.
const std::map<std::string, std::string> kCpuOnly = {};

std::set<std::string> dialectOps() {
  mlir::MLIRContext context;
  context.loadDialect<CpcDialect>();
  std::set<std::string> ops;
  for (mlir::RegisteredOperationName op : context.getRegisteredOperations())
    if (op.getDialectNamespace() == "cpc")
      ops.insert(op.getStringRef().str());
  return ops;
}

std::set<std::string> kernelNames(DeviceKind device) {
  std::vector<std::string> names = kernelRegistry().names(device);
  return {names.begin(), names.end()};
}

// Tests that every op of the dialect has a CPU kernel (and a CUDA one where built), is a
// collective, or is listed with its reason; and that no listed op has a kernel after all.
TEST(KernelCoverage, EveryDialectOpRunsOnEveryDevice) {
  std::set<std::string> ops = dialectOps(), cpu = kernelNames(DeviceKind::Cpu), cuda = kernelNames(DeviceKind::Cuda);
  ASSERT_GT(ops.size(), 50u);
  int checked = 0;
  for (const std::string &op : ops) {
    if (kNoKernel.count(op)) {
      EXPECT_FALSE(cpu.count(op) || findCollectiveKernel(op)) << op << " is listed as needing no kernel but has one";
      continue;
    }
    if (findCollectiveKernel(op))
      continue; // runs through the communicator, on the CPU and on GPUs
    ++checked;
    EXPECT_TRUE(cpu.count(op)) << op << " has no CPU kernel";
    if (cudaBackendBuilt() && !kCpuOnly.count(op)) {
      EXPECT_TRUE(cuda.count(op)) << op << " has no CUDA kernel";
    }
  }
  EXPECT_GT(checked, 40);
}

// Tests that the lists above name only ops the dialect has, so that they shrink with it.
TEST(KernelCoverage, ListsNameDialectOps) {
  std::set<std::string> ops = dialectOps();
  for (const auto &[op, why] : kNoKernel)
    EXPECT_TRUE(ops.count(op)) << op << " (" << why << ") is not an op of the dialect";
  for (const auto &[op, why] : kCpuOnly)
    EXPECT_TRUE(ops.count(op)) << op << " (" << why << ") is not an op of the dialect";
}

// Tests that the runtime registry has no kernel for an op the dialect does not define (a typo in
// a registration would otherwise leave the real op without its kernel), but for the plan's own
// steps, which have theirs on every device.
TEST(KernelCoverage, EveryKernelIsForADialectOp) {
  std::set<std::string> ops = dialectOps(), cpu = kernelNames(DeviceKind::Cpu), cuda = kernelNames(DeviceKind::Cuda);
  for (DeviceKind device : {DeviceKind::Cpu, DeviceKind::Cuda})
    for (const std::string &name : kernelNames(device))
      EXPECT_TRUE(ops.count(name) || kPlanOnly.count(name)) << name << " has a kernel but is not an op of the dialect";
  for (const auto &[op, why] : kPlanOnly) {
    EXPECT_FALSE(ops.count(op)) << op << " is an op of the dialect now: list it nowhere";
    EXPECT_TRUE(cpu.count(op)) << op << " (" << why << ") has no CPU kernel";
    if (cudaBackendBuilt()) {
      EXPECT_TRUE(cuda.count(op)) << op << " (" << why << ") has no CUDA kernel";
    }
  }
}

} // namespace
