//===- Executor.h - runs one rank's program of a plan ---------------------===//
#ifndef CPC_RUNTIME_EXECUTOR_H
#define CPC_RUNTIME_EXECUTOR_H

#include "kernels/cpu/Kernel.h"
#include "runtime/Plan.h"
#include "runtime/TensorIO.h"

#include <memory>
#include <string>
#include <vector>

namespace cpc {

struct ExecutorOptions {
  int rank = 0;
  int threads = 1;
};

/// Bytes the executor holds, by purpose (what the plan's predicted peak accounts for).
struct MemoryStats {
  int64_t arenaBytes = 0;
  int64_t parameterBytes = 0;
  int64_t constantBytes = 0;
  int64_t inputBytes = 0;
  int64_t total() const { return arenaBytes + parameterBytes + constantBytes + inputBytes; }
};

class Executor {
public:
  /// Prepares the program of `options.rank`: allocates the arena and parameter memory and resolves
  /// every step's kernel. `plan` must outlive the executor. Throws RuntimeError.
  Executor(const Plan &plan, ExecutorOptions options);
  ~Executor();

  /// Copies `tensor` into input `name`; shape and type must match. Throws RuntimeError.
  void bindInput(const std::string &name, const HostTensor &tensor);
  /// Fills every unbound input with deterministic synthetic data.
  void bindSyntheticInputs(uint64_t seed = 0);
  std::vector<std::string> unboundInputs() const;

  /// Runs the program once. Throws RuntimeError naming the failing step.
  void run();

  TensorRef output(const std::string &name) const;
  const std::vector<NamedBuffer> &outputs() const { return plan_.outputs; }
  MemoryStats memoryStats() const { return memory_; }

private:
  struct Memory;
  const Plan &plan_;
  ExecutorOptions options_;
  std::unique_ptr<Memory> mem_;
  std::vector<TensorRef> views_;  // one per plan buffer
  std::vector<kernels::KernelContext> contexts_;
  std::vector<kernels::KernelFn> kernels_;
  std::vector<bool> bound_;       // per plan input
  MemoryStats memory_;
  uint64_t runs_ = 0;
};

} // namespace cpc

#endif
