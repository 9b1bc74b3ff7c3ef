//===- Kernel.h - the kernel interface and the registry, for every device -===//
//
// One kernel per (cpc op, device, element type), registered under the op's kind (OpKind::Add,
// generated from the dialect's ODS: kernels/OpKind.h). A plan step names its op, its
// input/output buffers and the op's attributes, which the executor decodes once into an
// OpAttrs (kernels/OpAttrs.h). CPU kernels register for any
// element type (they dispatch inside, and 16-bit floats are widened around those that compute
// in f32); CUDA kernels register per element type. A lookup tries the step's element type, then
// the device's any-type entry.
//
#ifndef CPC_KERNELS_KERNEL_H
#define CPC_KERNELS_KERNEL_H

#include "kernels/OpAttrs.h"
#include "kernels/OpKind.h"
#include "kernels/Tensor.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace cpc {
class Communicator;
class Device;
}

namespace cpc::kernels {

struct KernelContext {
  OpKind op{};                     // the step's op (set by whoever builds the context), for messages
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> outputs;  // preallocated with their final shapes and types
  OpAttrs attrs;                   // decoded once when the plan is loaded
  int threads = 1;                 // threads the kernel may use
  uint64_t step = 0;               // the training step (else the run count), for random ops
  // The device the tensors live on (null: the host, as in the CPU kernels' unit tests); a CUDA
  // kernel takes its stream, library handles and workspace from it.
  Device *device = nullptr;
  // Collective steps (all_reduce, shard_slice) also need the ranks: set by the executor.
  Communicator *comm = nullptr;
  int rank = 0;
  const std::vector<int64_t> *meshShape = nullptr;
  const std::vector<std::string> *meshAxes = nullptr;
  const int64_t *microbatch = nullptr; // the microbatch the program runs for (point-to-point tags)
  int64_t channels = 1;                // the plan's point-to-point channels (tags: mb * channels + channel)

  /// Where a random op's elements start in its stream: microbatch m of a step draws the positions
  /// after those of microbatches 0..m-1 (each `numel` long), as if the step's batch were one tensor.
  int64_t randomOffset(int64_t numel) const { return (microbatch ? *microbatch : 0) * numel; }

  /// Decodes `json` into attrs (what the executor does once per step); throws RuntimeError.
  void setAttrs(const nlohmann::json &json);
  [[noreturn]] void fail(const std::string &message) const;
};

/// The element type a step is looked up under: its first output's, else its first input's.
DType stepDType(const KernelContext &ctx);

/// An indexed dim that a gather (or its gradient) holds as this rank's block: the op's
/// "block_axes" name the mesh axes splitting it, and its indices are global. Without the
/// attribute the block is the whole dim.
struct IndexBlock {
  int64_t offset = 0, local = 0, global = 0;
  /// The local position of global index `i` (in [0, global)), or -1 outside the block.
  int64_t localIndex(int64_t i) const { return i >= offset && i < offset + local ? i - offset : -1; }
};
IndexBlock indexBlock(const KernelContext &ctx, int64_t local);

using KernelFn = std::function<void(KernelContext &)>;
using KernelPtr = void (*)(KernelContext &);

/// How a kernel treats f16 and bf16 tensors.
enum class Storage16 {
  Widened,     // computes in f32: 16-bit operands are widened into f32 scratch, results rounded back
  Elementwise, // the same, chunk by chunk through small scratch when no operand broadcasts
  Native,      // handles them itself (moves bytes, or loads and stores 16-bit with f32 arithmetic)
};

/// The f32 scratch (in floats) a Native kernel needs for the 16-bit operands of `ctx` (only the
/// shapes and types are read): what the plan's memory prediction adds.
using ScratchFn = int64_t (*)(const KernelContext &ctx);

/// Host memory a CPU kernel writes beyond its operands and scratch16 that stays resident after
/// it returns, by its operands' shapes and types: what the plan's memory prediction adds, the
/// largest over a rank's steps of each part (the parts are reused by every kernel).
struct KernelWorkspace {
  int64_t heapBytes = 0; // temporaries: the heap keeps what they freed for the next kernel's
  int64_t packedA = 0;   // OpenBLAS's packing buffer (kernels/cpu/GemmPacking.h): A's block
  int64_t packedB = 0;   // and B's panel, in two places of it
  /// This workspace grown to hold `other` too (each part the larger).
  KernelWorkspace &cover(const KernelWorkspace &other) {
    heapBytes = std::max(heapBytes, other.heapBytes);
    packedA = std::max(packedA, other.packedA);
    packedB = std::max(packedB, other.packedB);
    return *this;
  }
};
using WorkspaceFn = KernelWorkspace (*)(const KernelContext &ctx);

class KernelRegistry {
public:
  /// The registry with every CPU kernel (kernels/cpu). The runtime's registry adds the CUDA
  /// kernels when they are built (runtime/Backend.h).
  static const KernelRegistry &cpu();
  /// Registers a CPU kernel for every element type.
  void add(OpKind op, KernelPtr fn, Storage16 storage = Storage16::Widened, ScratchFn scratch = nullptr) {
    add(op, DeviceKind::Cpu, std::nullopt, fn, storage, scratch);
  }
  /// Registers `fn` for `op` on `device`, for element type `dtype` (nullopt: any).
  void add(OpKind op, DeviceKind device, std::optional<DType> dtype, KernelPtr fn,
           Storage16 storage = Storage16::Native, ScratchFn scratch = nullptr) {
    table_[Key{op, device, dtype ? (int)*dtype : kAnyType}] = {fn, storage, scratch};
  }
  /// Adds every entry of `other` (replacing those with the same key).
  void merge(const KernelRegistry &other);
  /// The kernel for `op` on `device` for element type `dtype` (else its any-type kernel), or
  /// null; a Widened kernel comes wrapped so that it accepts 16-bit floats.
  KernelFn find(OpKind op, DeviceKind device, DType dtype) const;
  /// The CPU kernel for `op`.
  KernelFn find(OpKind op) const { return find(op, DeviceKind::Cpu, DType::F32); }
  /// Bytes of the thread's 16-bit scratch (scratch16) that the CPU kernel of `op` needs on the
  /// operands of `ctx` (shapes and types only; 0 without 16-bit operands or for an unknown op).
  int64_t scratchBytes(OpKind op, const KernelContext &ctx) const;
  /// Says what the CPU kernel of `op` keeps beyond its operands (kernels without: nothing).
  void setWorkspace(OpKind op, WorkspaceFn fn) { workspace_[op] = fn; }
  /// What the CPU kernel of `op` keeps beyond its operands on the operands of `ctx` (shapes and
  /// types only), on one thread.
  KernelWorkspace workspace(OpKind op, const KernelContext &ctx) const;
  /// The ops with a kernel on `device`.
  std::vector<OpKind> kinds(DeviceKind device = DeviceKind::Cpu) const;
  /// The element types `op` has its own kernel for on `device` (empty with an any-type kernel).
  std::vector<DType> dtypes(OpKind op, DeviceKind device) const;

private:
  static constexpr int kAnyType = -1;
  struct Key {
    OpKind op;
    DeviceKind device;
    int dtype;
    bool operator<(const Key &o) const { return std::tie(op, device, dtype) < std::tie(o.op, o.device, o.dtype); }
  };
  struct Entry {
    KernelPtr fn;
    Storage16 storage;
    ScratchFn scratch;
  };
  const Entry *lookup(OpKind op, DeviceKind device, DType dtype) const;
  std::map<Key, Entry> table_;
  std::map<OpKind, WorkspaceFn> workspace_;
};

} // namespace cpc::kernels

#endif
