//===- DeviceFaultTest.cpp - the executor fails the step a device fault names ===//
//
// Tests that the executor tags every step it runs on the device (Device::setFaultSite) and,
// when the device reports a fault a kernel recorded (Device::takeFault), fails with the step's
// program, index, location and op, and the CPU kernel's words: at the end of the run when the
// fault is there by then, or at the next copy to the host when the kernel ran later. The device
// here is the CPU's, with a fault injected where a GPU kernel would have recorded it.
//
#include "compiler/PlanBuilder.h"
#include "dialects/cpc/CpcDialect.h"
#include "runtime/Executor.h"
#include "tests/unit/TestWeights.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace {

using namespace cpc;

constexpr const char *kModule = R"mlir(
func.func @main() -> tensor<2xf32> {
  %d = cpc.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %i = cpc.constant dense<[0, 3]> : tensor<2xi64>
  %g = cpc.gather %d, %i {axis = 0 : i64} : (tensor<4xf32>, tensor<2xi64>) -> tensor<2xf32>
  %e = cpc.exp %g : tensor<2xf32>
  return %e : tensor<2xf32>
}
)mlir";

/// The CPU device, which records the sites it is given and reports one fault, as a GPU would
/// for a kernel launched at `faultyStep`, from the `visibleAt`-th look on (1: the first).
class FaultingDevice final : public Device {
public:
  FaultingDevice(int64_t faultyStep, int visibleAt) : faultyStep_(faultyStep), visibleAt_(visibleAt) {}

  DeviceKind kind() const override { return cpu_->kind(); }
  int index() const override { return 0; }
  std::string name() const override { return "faulting cpu"; }
  Allocator &allocator(MemorySpace space) override { return cpu_->allocator(space); }
  Stream &computeStream() override { return cpu_->computeStream(); }
  Stream &commStream() override { return cpu_->commStream(); }
  std::unique_ptr<Event> makeEvent() override { return cpu_->makeEvent(); }
  void copy(void *dst, MemorySpace dstSpace, const void *src, MemorySpace srcSpace, size_t bytes) override {
    cpu_->copy(dst, dstSpace, src, srcSpace, bytes);
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch, size_t width, size_t height) override {
    cpu_->copy2D(dst, dstPitch, src, srcPitch, width, height);
  }
  void fillZero(void *dst, size_t bytes) override { cpu_->fillZero(dst, bytes); }
  void synchronize() override {}
  void *scratch(int slot, size_t bytes) override { return cpu_->scratch(slot, bytes); }

  void setFaultSite(int64_t site) override {
    sites.push_back(site);
    if ((site & 0xffffffff) == faultyStep_)
      pending_ = site;
  }
  kernels::KernelFault takeFault() override {
    kernels::KernelFault fault;
    if (pending_ < 0 || ++looks_ < visibleAt_)
      return fault;
    fault.kind = int32_t(kernels::FaultKind::IndexOutOfRange);
    fault.site = pending_;
    fault.value = 9, fault.size = 4, fault.dim = 0;
    pending_ = -1;
    return fault;
  }

  std::vector<int64_t> sites;

private:
  std::unique_ptr<Device> cpu_ = makeCpuDevice();
  int64_t faultyStep_, pending_ = -1;
  int visibleAt_, looks_ = 0;
};

struct PlanFixture : ::testing::Test {
  mlir::MLIRContext context;
  Plan plan;
  void SetUp() override {
    context.loadDialect<CpcDialect, mlir::func::FuncDialect>();
    auto module = mlir::parseSourceString<mlir::ModuleOp>(kModule, &context);
    ASSERT_TRUE(module);
    mlir::FailureOr<Plan> built = buildPlan(*module, std::make_shared<test::DoubleWeights>(), "fault-test", PlanOptions{});
    ASSERT_TRUE(mlir::succeeded(built));
    plan = std::move(*built);
  }
  /// The step of the plan's program that runs `op`.
  int64_t stepOf(OpKind op) const {
    const auto &steps = plan.programs.at(0).steps;
    for (size_t i = 0; i < steps.size(); ++i)
      if (steps[i].op == op)
        return (int64_t)i;
    ADD_FAILURE() << "no " << op << " step";
    return -1;
  }
};

using DeviceFault = PlanFixture;

TEST_F(DeviceFault, TheRunFailsNamingTheStepAndTheCpuMessage) {
  int64_t gather = stepOf(OpKind::Gather);
  FaultingDevice device(gather, 1);
  ExecutorOptions options;
  options.device = &device;
  Executor exec(plan, options);
  try {
    exec.run("main");
    FAIL() << "the run did not fail";
  } catch (const RuntimeError &e) {
    std::string message = e.what();
    std::string expected = "program main, step " + std::to_string(gather) + " (" +
                           plan.programs.at(0).steps[gather].loc +
                           "): cpc.gather: index 9 is out of range for dim 0 of size 4";
    EXPECT_EQ(message, expected);
  }
  // Every step was tagged, in order, with program 0.
  ASSERT_EQ(device.sites.size(), plan.programs.at(0).steps.size());
  for (size_t i = 0; i < device.sites.size(); ++i)
    EXPECT_EQ(device.sites[i], Executor::faultSite(0, (int64_t)i));
}

TEST_F(DeviceFault, AFaultOfWorkStillQueuedFailsTheNextCopyToTheHost) {
  int64_t gather = stepOf(OpKind::Gather);
  FaultingDevice device(gather, 2); // not there yet when the run ends
  ExecutorOptions options;
  options.device = &device;
  Executor exec(plan, options);
  exec.run("main");
  EXPECT_THROW(
      {
        try {
          exec.readOutput(plan.outputs.at(0).name);
        } catch (const RuntimeError &e) {
          EXPECT_NE(std::string(e.what()).find("cpc.gather: index 9 is out of range"), std::string::npos) << e.what();
          throw;
        }
      },
      RuntimeError);
  EXPECT_NO_THROW(exec.readOutput(plan.outputs.at(0).name)); // taken: reported once
}

} // namespace
