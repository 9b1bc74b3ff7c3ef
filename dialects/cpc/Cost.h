//===- Cost.h - rough per-op costs for the compiler's decisions -----------===//
//
// One place for what an op costs to run: pipeline stage balancing reads it (and a cost model
// with measured throughputs will replace the constants). Counts are of one run of the op on
// its result's shape.
//
#ifndef CPC_DIALECTS_CPC_COST_H
#define CPC_DIALECTS_CPC_COST_H

#include "mlir/IR/Operation.h"

#include <cstdint>

namespace cpc {

/// Floating-point operations of `op`: 2*M*N*K for a matmul, 2 * output elements * (input
/// channels x kernel area) for a convolution and its gradients, one per result element for the
/// rest (elementwise, reductions, data movement).
int64_t estimateFlops(mlir::Operation *op);

/// Bytes of a ranked tensor value (0 for anything else).
int64_t valueBytes(mlir::Value v);

/// Estimated seconds of `op` on one CPU core: the larger of its FLOPs at GEMM speed and the
/// bytes it reads and writes at memory speed (softmax, LayerNorm and elementwise ops are
/// bound by memory, matmuls by arithmetic). The rates are this project's CPU's, rounded.
double estimateSeconds(mlir::Operation *op);
inline constexpr double kFlopsPerSecond = 40e9;
inline constexpr double kBytesPerSecond = 4e9;

} // namespace cpc

#endif
