//===- Backend.cpp - choosing the device and the kernels of a plan ---------===//
#include "runtime/Device.h"
#include "runtime/CollectiveKernels.h"
#include "runtime/Plan.h"
#include "kernels/cpu/GemmCuts.h"

#include <algorithm>
#include <map>

#include <cstdlib>
#include <sched.h>
#include <string>
#include <thread>

#ifdef CPC_WITH_CUDA
#include "kernels/cuda/CudaKernels.h"
#endif

namespace cpc {

const kernels::KernelRegistry &kernelRegistry() {
  static const kernels::KernelRegistry registry = [] {
    kernels::KernelRegistry r;
    r.merge(kernels::KernelRegistry::cpu());
#ifdef CPC_WITH_CUDA
    kernels::registerCudaKernels(r);
#endif
    return r;
  }();
  return registry;
}

std::vector<std::string> missingKernels(const Plan &plan) {
  const kernels::KernelRegistry &registry = kernelRegistry();
  std::map<std::string, int> missing;
  for (const RankProgram &program : plan.programs)
    for (const StepDesc &step : program.steps) {
      if (findCollectiveKernel(step.op))
        continue;
      kernels::KernelContext ctx;
      for (int b : step.inputs)
        ctx.inputs.push_back(TensorRef{nullptr, plan.buffers[b].dtype, plan.buffers[b].shape});
      for (int b : step.outputs)
        ctx.outputs.push_back(TensorRef{nullptr, plan.buffers[b].dtype, plan.buffers[b].shape});
      DType type = kernels::stepDType(ctx);
      if (!registry.find(step.op, plan.device, type))
        missing[std::string(opName(step.op)) + " on " + dtypeName(type)]++;
    }
  std::vector<std::string> out;
  for (const auto &[what, steps] : missing)
    out.push_back(what + " (" + std::to_string(steps) + " step" + (steps > 1 ? "s" : "") + ")");
  return out;
}

int localRank() {
  // OpenMPI's mpirun, MPICH / Intel MPI (Hydra), Slurm's srun.
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *local = std::getenv(name))
      return std::atoi(local);
  return 0;
}

int localRanks() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char *local = std::getenv(name))
      return std::max(1, std::atoi(local));
  return 1;
}

int availableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string oversubscriptionWarning(int ranks, int threads, int cores, int rankCores) {
  if (threads <= 1)
    return "";
  if (threads > rankCores)
    return std::to_string(threads) + " threads per rank exceed the " + std::to_string(rankCores) + " core" +
           (rankCores > 1 ? "s" : "") + " this rank may use: the threads wait for each other (use --threads " +
           std::to_string(rankCores) + ")";
  if ((int64_t)ranks * threads > cores)
    return std::to_string(ranks) + " ranks x " + std::to_string(threads) + " threads on this machine exceed its " +
           std::to_string(cores) + " cores: the threads wait for each other (use --threads " +
           std::to_string(std::max(1, cores / std::max(1, ranks))) + ")";
  return "";
}

std::string gemmThreadsNote(int threads) {
  if (threads <= 1 || (kernels::gemmCutRule(false).known && kernels::gemmCutRule(true).known))
    return "";
  return kernels::openBlasDescription() + " is not a version and core whose GEMM kernels cpc has read: each GEMM "
         "runs on one thread (the other kernels on " + std::to_string(threads) + ")";
}

std::unique_ptr<Device> makeDevice(DeviceKind kind, int localRank) {
  if (kind == DeviceKind::Cpu)
    return makeCpuDevice();
  std::string why;
  int count = cudaDeviceCount(&why);
  if (count == 0)
    throw RuntimeError("this plan runs on CUDA GPUs and this machine has none usable (" + why + ")");
  if (localRank >= count) // NCCL does not run two ranks on one GPU
    throw RuntimeError("local rank " + std::to_string(localRank) + " needs GPU " + std::to_string(localRank) +
                       " and this machine has " + std::to_string(count) + " (run at most one rank per GPU)");
  return makeCudaDevice(localRank);
}

} // namespace cpc
