//===- Kernel.h - the CPU kernel interface and registry -------------------===//
//
// One kernel per cpc op, registered under the op's name ("cpc.add"). A plan step names its
// kernel, its input/output buffers and the op's attributes as JSON (the ODS attribute names:
// "axes", "keepdims", "axis", "epsilon", "permutation", "starts", "limits", "strides", "k",
// "largest", "sorted", "descending", "padding", "dilations", "groups", "approximate", "low",
// "high", "seed", "reduction"; integer arrays are JSON arrays, unit attributes true).
//
#ifndef CPC_KERNELS_CPU_KERNEL_H
#define CPC_KERNELS_CPU_KERNEL_H

#include "kernels/Tensor.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cpc {
class Communicator;
}

namespace cpc::kernels {

struct KernelContext {
  std::string op;                  // e.g. "cpc.add", for messages
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> outputs;  // preallocated with their final shapes and types
  const nlohmann::json *attrs;     // never null; {} when the op has none
  int threads = 1;                 // threads the kernel may use
  uint64_t step = 0;               // execution counter, for random ops that differ per step
  // Collective steps (all_reduce, shard_slice) also need the ranks: set by the executor.
  Communicator *comm = nullptr;
  int rank = 0;
  const std::vector<int64_t> *meshShape = nullptr;
  const std::vector<std::string> *meshAxes = nullptr;
  const int64_t *microbatch = nullptr; // the microbatch the program runs for (point-to-point tags)
  int64_t channels = 1;                // the plan's point-to-point channels (tags: mb * channels + channel)

  const nlohmann::json &attr(const char *name) const;
  int64_t attrInt(const char *name) const { return attr(name).get<int64_t>(); }
  double attrFloat(const char *name) const { return attr(name).get<double>(); }
  std::vector<int64_t> attrInts(const char *name) const { return attr(name).get<std::vector<int64_t>>(); }
  bool attrBool(const char *name, bool fallback) const;
  std::string attrString(const char *name, const std::string &fallback) const;
  [[noreturn]] void fail(const std::string &message) const;
};

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

class KernelRegistry {
public:
  /// The registry with every CPU kernel.
  static const KernelRegistry &cpu();
  void add(const std::string &op, KernelPtr fn, Storage16 storage = Storage16::Widened, ScratchFn scratch = nullptr) {
    table_[op] = {fn, storage, scratch};
  }
  /// The kernel for `op`, or null; a Widened kernel comes wrapped so that it accepts 16-bit floats.
  KernelFn find(const std::string &op) const;
  /// Bytes of the thread's 16-bit scratch (scratch16) that `op` needs on the operands of `ctx`
  /// (shapes and types only; 0 without 16-bit operands or for an unknown op).
  int64_t scratchBytes(const std::string &op, const KernelContext &ctx) const;
  std::vector<std::string> names() const;

private:
  struct Entry {
    KernelPtr fn;
    Storage16 storage;
    ScratchFn scratch;
  };
  std::map<std::string, Entry> table_;
};

/// The calling thread's f32 scratch for 16-bit operands: at least `floats` long, grown as needed
/// and never shrunk (one buffer per thread, as large as the largest step needs).
float *scratch16(int64_t floats);

/// Runs `fn` with every f16/bf16 operand and result replaced by an f32 copy in scratch16,
/// rounding the results back: f32 arithmetic on 16-bit storage. The cost is one widening pass
/// over the 16-bit operands and results and one narrowing pass over the results.
void runWidened(KernelPtr fn, KernelContext &ctx);
/// The same for a kernel that computes each element from the same element of every operand:
/// when no operand broadcasts, it runs on chunks of kWidenChunk elements through small scratch.
void runWidenedElementwise(KernelPtr fn, KernelContext &ctx);
/// Floats of scratch16 that runWidened / runWidenedElementwise use on `ctx`.
int64_t widenedScratch(const KernelContext &ctx, bool elementwise);
constexpr int64_t kWidenChunk = 1 << 16;

/// Below this many elements a kernel runs on one thread (starting threads would cost more).
constexpr int64_t kParallelMin = 1 << 15;

/// Width of the column blocks when [outer, ..., inner] work is split into outer x column-block
/// tasks: narrow enough that `threads` threads all get some even when outer is small, at least
/// 16 columns, at most `maxBlock` (a kernel's stack buffer).
inline int64_t columnBlock(int64_t inner, int64_t outer, int threads, int64_t maxBlock = INT64_MAX) {
  int64_t want = std::max<int64_t>(1, 4 * threads / std::max<int64_t>(1, outer));
  return std::clamp<int64_t>((inner + want - 1) / want, 16, std::max<int64_t>(16, maxBlock));
}

// Tables filled by the files in kernels/cpu/.
void registerElementwiseKernels(KernelRegistry &registry);
void registerReductionKernels(KernelRegistry &registry);
void registerNormalizationKernels(KernelRegistry &registry); // layer_norm, softmax
void registerLinalgKernels(KernelRegistry &registry);        // matmul, conv2d
void registerMovementKernels(KernelRegistry &registry);      // transpose, slice, concat, broadcast, reshape
void registerIndexingKernels(KernelRegistry &registry);      // gather, gather_elements, scatter_nd, topk, argsort
void registerRandomKernels(KernelRegistry &registry);        // random_uniform
void registerBackwardKernels(KernelRegistry &registry);      // pad and the *_grad ops
void registerOptimizerKernels(KernelRegistry &registry);     // adamw
void registerVariableKernels(KernelRegistry &registry);      // assign

} // namespace cpc::kernels

#endif
