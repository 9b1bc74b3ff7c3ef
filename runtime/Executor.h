//===- Executor.h - runs one rank's program of a plan ---------------------===//
#ifndef CPC_RUNTIME_EXECUTOR_H
#define CPC_RUNTIME_EXECUTOR_H

#include "kernels/Kernel.h"
#include "runtime/CollectiveKernels.h"
#include "runtime/Device.h"
#include "runtime/Plan.h"
#include "runtime/TensorIO.h"

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cpc {

class TraceRecorder;

class Communicator;

struct ExecutorOptions {
  int rank = 0;
  int threads = 1;
  bool profile = false; // time every step, summed by op (see profile())
  Communicator *comm = nullptr; // collectives; required when the plan has more than one rank
  // What the plan's programs run on; null: the executor makes one for the plan's device (the
  // host, or GPU 0). Its kind must be the plan's.
  Device *device = nullptr;
  TraceRecorder *trace = nullptr; // when set, every program run and step is recorded
};

/// Bytes the executor holds, by purpose (what the plan's predicted peak accounts for).
struct MemoryStats {
  int64_t arenaBytes = 0;
  int64_t parameterBytes = 0;
  int64_t stateBytes = 0;
  int64_t constantBytes = 0;
  int64_t inputBytes = 0;
  int64_t inPlanBytes = 0; // of the above, read in place from a plan held in memory
  int64_t total() const { return arenaBytes + parameterBytes + stateBytes + constantBytes + inputBytes; }
};

class Executor {
public:
  /// Prepares the programs of `options.rank`: allocates the arena, parameter and state memory and
  /// resolves every step's kernel. `plan` must outlive the executor. Throws RuntimeError.
  Executor(const Plan &plan, ExecutorOptions options);
  ~Executor();

  /// Copies `tensor` into input `name` (of every program that has one); shape and type must
  /// match. Throws RuntimeError.
  void bindInput(const std::string &name, const HostTensor &tensor);
  /// Fills every unbound input with deterministic synthetic data.
  void bindSyntheticInputs(uint64_t seed = 0);
  std::vector<std::string> unboundInputs() const;

  /// Runs program `name` once. Throws RuntimeError naming the failing step.
  void run(const std::string &name = "main");
  /// The microbatch the next runs are for (tags their point-to-point messages).
  void setMicrobatch(int64_t microbatch) { microbatch_ = microbatch; }
  /// The training step the next runs belong to: random ops draw from it (by default, from the
  /// number of times their program has run), so every microbatch program of a step agrees.
  void setTrainingStep(int64_t step) { trainingStep_ = step; }
  /// Which plan buffers (roots) the programs of `rank` use: the memory the rank allocates.
  static std::vector<bool> buffersOfRank(const Plan &plan, int rank);
  bool hasProgram(const std::string &name) const;

  /// Output `name` of program `program` (any program, the last that has it, when empty): a view
  /// of the device's memory (host memory only on a CPU plan; use readOutput to read it).
  TensorRef output(const std::string &name, const std::string &program = "") const;
  /// A host copy of output `name` (waits for the programs run so far).
  HostTensor readOutput(const std::string &name, const std::string &program = "") const;
  /// The single element of output `name` as a double (a loss, a norm).
  double readScalar(const std::string &name, const std::string &program = "") const;
  /// Copies the bytes of `tensor` (a view of this executor's memory) to host memory at `dst`.
  void copyToHost(const TensorRef &tensor, void *dst) const;
  /// Throws RuntimeError naming the step, with the CPU kernel's message, when a kernel of this
  /// executor's device recorded a fault (kernels/KernelFault.h) that the host has not taken yet.
  /// run() checks at its end (faults of work still queued show later), copyToHost after a copy
  /// that moved bytes (all work before it has run), and synchronize().
  void checkDeviceFaults() const;
  /// Waits for the device's queued work, then checkDeviceFaults(): the end of a step.
  void synchronize() const {
    device_->synchronize();
    checkDeviceFaults();
  }
  /// The tag of step `step` of program `program` in the device's fault records, and back.
  static int64_t faultSite(int64_t program, int64_t step) { return program << 32 | step; }
  static std::pair<size_t, size_t> programAndStep(int64_t site) {
    return {size_t(uint64_t(site) >> 32), size_t(site & 0xffffffff)};
  }
  Device &device() const { return *device_; }
  /// The communicator the steps' collectives use (null without one).
  Communicator *communicator() const { return options_.comm; }
  /// Current value of a parameter or state variable.
  TensorRef variable(const std::string &name) const;
  /// The whole value of a parameter or state: a sharded parameter's blocks are all-gathered,
  /// so every rank of its group must call this together.
  HostTensor wholeVariable(const std::string &name) const;
  /// Sets a parameter or state from its whole value in the model's element order (what
  /// wholeVariable returns, on any layout): this rank keeps its block. Throws RuntimeError when
  /// the type or shape differs from the variable's.
  void setVariable(const std::string &name, const HostTensor &whole);
  const std::vector<NamedBuffer> &outputs() const { return plan_.outputs; }
  MemoryStats memoryStats() const { return memory_; }
  /// Seconds spent per op kind over all runs (only with ExecutorOptions::profile); with
  /// `byShape`, per op and operand shapes.
  std::vector<std::pair<std::string, double>> profile(bool byShape = false) const;
  /// Seconds spent in each step of program `name` over all its runs (only with profile).
  std::vector<double> stepSeconds(const std::string &name) const;

private:
  /// The plan buffer of parameter or state `name`; throws RuntimeError when there is none.
  size_t variableIndex(const std::string &name) const;
  /// `whole` (a variable's whole stored value) in the model's element order.
  static HostTensor inModelOrder(const BufferDesc &desc, HostTensor whole);
  /// Reads parameter `b`'s initial value, or this rank's block of it, from the plan's blob into
  /// host memory at `dst`.
  void loadBlock(const BufferDesc &b, void *dst) const;
  /// Memory for root buffer `b` in its memory space, zero-filled.
  void *allocateBuffer(const BufferDesc &b);
  /// The arena: in memory the node's ranks share for a CPU plan of several ranks (collective),
  /// else from the device.
  void allocateArena(int64_t bytes);
  /// Copies `bytes` of host memory into buffer memory `dst`.
  void upload(void *dst, const void *src, size_t bytes) const;
  /// Prepares the steps of `desc` (attributes decoded, kernels found) for this rank.
  void prepareProgram(const RankProgram &desc);
  /// Tells the communicator, before the first step, every group the plan's collectives use and
  /// this rank's point-to-point peers (NCCL builds its communicators for them collectively).
  void prepareCommunication();

  struct Memory;
  const Plan &plan_;
  ExecutorOptions options_;
  std::unique_ptr<Device> ownedDevice_;
  Device *device_ = nullptr;
  std::unique_ptr<Memory> mem_;
  struct Program {
    const RankProgram *desc;
    std::vector<kernels::KernelContext> contexts;
    std::vector<kernels::KernelFn> kernels;
    std::vector<CollectiveKernelFn> collectives; // per step: its kernel when it involves other ranks
    std::vector<bool> communicates; // per step: a collective or transfer (trace category "comm")
    // Per step: the last earlier collective step whose buffers it touches (-1: none), which must
    // have completed before it runs; a point-to-point transfer waits for every collective.
    std::vector<int64_t> waitsFor;
    std::vector<double> stepSeconds;
    uint64_t runs = 0;
  };
  /// A collective step of the running program left in flight.
  struct InFlight {
    size_t step;
    std::unique_ptr<Work> work;
  };
  /// For every step of `program`, the collective it waits for (Program::waitsFor).
  static std::vector<int64_t> collectiveWaits(const Program &program);
  /// Moves the collectives in flight on, then completes those up to step `until` (in order).
  void settleCollectives(Program &program, int64_t until);
  std::vector<TensorRef> views_;  // one per plan buffer
  std::vector<Program> programs_;
  std::vector<bool> bound_;       // per plan input
  std::deque<InFlight> inFlight_; // oldest first; empty between runs
  int64_t microbatch_ = 0;
  int64_t trainingStep_ = -1; // none set: the program's run count
  bool runsHere(const NamedBuffer &n) const;
  MemoryStats memory_;
};

} // namespace cpc

#endif
