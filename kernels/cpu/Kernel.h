//===- Kernel.h - what the CPU kernels share: 16-bit widening, threading ---===//
//
// The interface and the registry are device-neutral (kernels/Kernel.h); this adds what only the
// CPU kernels use: the f32 scratch that widens 16-bit operands, thread-splitting thresholds, and
// the tables that register each family.
//
#ifndef CPC_KERNELS_CPU_KERNEL_H
#define CPC_KERNELS_CPU_KERNEL_H

#include "kernels/Kernel.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace cpc::kernels {

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

/// Offsets, in `strides`, of the positions over dims [lo, hi) of `shape` in row-major order:
/// how gather_elements and its gradient find the element at index position (outer, i, inner) in
/// a tensor whose dims may differ in size from the index tensor's.
inline std::vector<int64_t> positionOffsets(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides,
                                            int64_t lo, int64_t hi) {
  int64_t count = 1;
  for (int64_t d = lo; d < hi; ++d)
    count *= shape[d];
  std::vector<int64_t> off(count, 0);
  for (int64_t e = 0; e < count; ++e)
    for (int64_t d = hi - 1, rem = e; d >= lo; rem /= shape[d], --d)
      off[e] += (rem % shape[d]) * strides[d];
  return off;
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
void registerFusedKernels(KernelRegistry &registry);         // matmul_bias
void registerAttentionKernels(KernelRegistry &registry);     // attention, attention_grad

} // namespace cpc::kernels

#endif
