//===- BackendTest.cpp - devices, the kernel registry by (op, device, dtype) -===//
#include "kernels/cpu/Kernel.h"
#include "kernels/cpu/GemmCuts.h"
#include "runtime/Device.h"
#include "runtime/Executor.h"
#include "runtime/Plan.h"

#include <gtest/gtest.h>

#include <cstring>

namespace cpc {
namespace {

void markF16(kernels::KernelContext &ctx) { ctx.step = 16; }
void markAny(kernels::KernelContext &ctx) { ctx.step = 1; }

// Tests that a lookup takes the step's element type's kernel, else the device's any-type one,
// and never another device's.
TEST(KernelRegistry, DispatchesByOpDeviceAndType) {
  kernels::KernelRegistry r;
  r.add(OpKind::Add, DeviceKind::Cuda, DType::F16, markF16);
  r.add(OpKind::Add, DeviceKind::Cuda, std::nullopt, markAny);
  kernels::KernelContext ctx;
  r.find(OpKind::Add, DeviceKind::Cuda, DType::F16)(ctx);
  EXPECT_EQ(ctx.step, 16u);
  r.find(OpKind::Add, DeviceKind::Cuda, DType::F32)(ctx);
  EXPECT_EQ(ctx.step, 1u);
  EXPECT_FALSE(r.find(OpKind::Add, DeviceKind::Cpu, DType::F32));
  EXPECT_EQ(r.kinds(DeviceKind::Cuda), std::vector<OpKind>{OpKind::Add});
  EXPECT_EQ(r.dtypes(OpKind::Add, DeviceKind::Cuda), std::vector<DType>{DType::F16});
}

// Tests that the runtime's registry holds every CPU kernel, and CUDA kernels only when built.
TEST(KernelRegistry, RuntimeRegistryHasTheCpuKernels) {
  const kernels::KernelRegistry &all = kernelRegistry();
  EXPECT_EQ(all.kinds(DeviceKind::Cpu), kernels::KernelRegistry::cpu().kinds(DeviceKind::Cpu));
  if (!cudaBackendBuilt())
    EXPECT_TRUE(all.kinds(DeviceKind::Cuda).empty());
}

// Tests the host device: zeroed memory, accounted bytes, copies (plain and strided), scratch.
TEST(CpuDevice, MemoryAndCopies) {
  std::unique_ptr<Device> cpu = makeCpuDevice();
  EXPECT_EQ(cpu->tensorSpace(), MemorySpace::Host);
  Allocator &host = cpu->allocator(MemorySpace::Host);
  auto *p = static_cast<float *>(host.allocate(40));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(host.bytesInUse(), 256);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(p[i], 0.0f);
  float src[6] = {1, 2, 3, 4, 5, 6}, dst[4] = {};
  cpu->copy2D(dst, 8, src, 12, 8, 2); // the first two of each row of three
  EXPECT_EQ(dst[0], 1);
  EXPECT_EQ(dst[1], 2);
  EXPECT_EQ(dst[2], 4);
  EXPECT_EQ(dst[3], 5);
  cpu->copy(p, MemorySpace::Host, src, MemorySpace::Host, sizeof src);
  EXPECT_EQ(p[5], 6);
  host.deallocate(p);
  EXPECT_EQ(host.bytesInUse(), 0);
  EXPECT_EQ(host.peakBytes(), 256);
  EXPECT_THROW(cpu->allocator(MemorySpace::Device), RuntimeError);
  EXPECT_NE(cpu->scratch(1, 1000), nullptr);
}

// Tests that a cuda device is refused with one clear line where there is none.
TEST(Devices, NoGpuIsAClearError) {
  std::string why;
  if (cudaDeviceCount(&why) > 0)
    GTEST_SKIP() << "this machine has a GPU";
  EXPECT_FALSE(why.empty());
  try {
    makeDevice(DeviceKind::Cuda, 0);
    FAIL() << "no error";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

// Tests that a plan's buffers must live in its device's memory space.
TEST(PlanDevice, BuffersLiveInTheDevicesSpace) {
  Plan plan;
  plan.buffers.push_back(BufferDesc{"x", DType::F32, {4}, BufferKind::Arena});
  plan.programs.push_back(RankProgram{});
  plan.programs[0].arenaBytes = 64;
  plan.validate();
  plan.device = DeviceKind::Cuda;
  try {
    plan.validate();
    FAIL() << "no error";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("'x' is in host memory, but a cuda plan"), std::string::npos) << e.what();
  }
  plan.buffers[0].space = MemorySpace::Device;
  plan.validate();
}

} // namespace
} // namespace cpc

namespace {

// Tests when cpc-run warns that kernel threads need more cores than there are: ranks x threads
// over the machine's cores, or threads over the cores a (bound) rank may use; never for one
// thread per rank (oversubscribing ranks is mpirun's explicit --oversubscribe).
TEST(Oversubscription, WarnsWhenThreadsNeedMoreCoresThanThereAre) {
  EXPECT_EQ(cpc::oversubscriptionWarning(1, 2, 2, 2), "");
  EXPECT_EQ(cpc::oversubscriptionWarning(8, 1, 2, 2), "");
  EXPECT_EQ(cpc::oversubscriptionWarning(2, 4, 16, 16), "");
  std::string crowded = cpc::oversubscriptionWarning(2, 2, 2, 2);
  EXPECT_NE(crowded.find("2 ranks x 2 threads"), std::string::npos) << crowded;
  EXPECT_NE(crowded.find("2 cores"), std::string::npos) << crowded;
  EXPECT_NE(crowded.find("--threads 1"), std::string::npos) << crowded;
  std::string bound = cpc::oversubscriptionWarning(4, 2, 16, 1); // mpirun --bind-to core
  EXPECT_NE(bound.find("the 1 core this rank may use"), std::string::npos) << bound;
  EXPECT_GE(cpc::availableCores(), 1);
}

// Tests the note on an OpenBLAS whose GEMM cut points cpc does not know: none at one thread,
// none where it knows them, else one line naming the library.
TEST(Backend, GemmThreadsNoteOnlyForAnUnknownOpenBlas) {
  EXPECT_EQ(cpc::gemmThreadsNote(1), "");
  std::string note = cpc::gemmThreadsNote(3);
  bool known = cpc::kernels::gemmCutRule(false).known && cpc::kernels::gemmCutRule(true).known;
  EXPECT_EQ(note.empty(), known) << note;
  if (!known) {
    EXPECT_NE(note.find(cpc::kernels::openBlasDescription()), std::string::npos) << note;
  }
}

} // namespace
