//===- Cost.h - rough per-op costs for the compiler's decisions -----------===//
//
// One place for what an op costs to run: pipeline stage balancing and the plan's predicted step
// time read it, priced by a cost profile (runtime/CostProfile.h: measured by `cpc calibrate`, or
// the built-in rates). Counts are of one run of the op on its result's shape.
//
#ifndef CPC_DIALECTS_CPC_COST_H
#define CPC_DIALECTS_CPC_COST_H

#include "runtime/CostProfile.h"

#include "mlir/IR/Operation.h"

#include <cstdint>
#include <optional>

namespace cpc {

/// Floating-point operations of `op`: 2*M*N*K for a GEMM (gemmDims), the products and softmax
/// of attention, one per result element for the rest (elementwise, reductions, data movement).
int64_t estimateFlops(mlir::Operation *op);

/// The GEMM an op is (matmuls; convolutions and their gradients as implicit GEMMs), or nullopt.
std::optional<GemmDims> gemmDims(mlir::Operation *op);

/// Bytes of a ranked tensor value (0 for anything else).
int64_t valueBytes(mlir::Value v);

/// The throughput of a cost profile that prices `op`: GEMM (matmuls, convolutions), attention,
/// the optimizer, or memory (elementwise ops, norms, softmax, data movement).
CostClass costClass(mlir::Operation *op);

/// Bytes `op` reads and writes: its operands and results (a slice its result twice; none for a
/// view).
int64_t movedBytes(mlir::Operation *op);

/// The cost profile at `path` (cpc calibrate), or the built-in one for ""; a file that cannot be
/// read is an error at `at` naming it.
mlir::FailureOr<CostProfile> loadCostProfile(mlir::Operation *at, const std::string &path);

/// Estimated seconds of `op` under `profile` (its class's rate on its FLOPs or bytes).
double estimateSeconds(mlir::Operation *op, const CostProfile &profile);
/// The same under the built-in rates (CostProfile::builtIn).
double estimateSeconds(mlir::Operation *op);

} // namespace cpc

#endif
