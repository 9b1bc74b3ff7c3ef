//===- ModelCuts.h - where a forward model can be cut, and what a cut costs ===//
//
// Shared by the passes that cut the loss function into contiguous runs of ops before autodiff:
// pipeline chunks (cpc-pipeline-stages) and recompute segments (cpc-recompute-segments). Both
// price the ops that depend on input data, forward and backward, and the bytes that cross each
// position of the program.
//
#ifndef CPC_PASSES_MODELCUTS_H
#define CPC_PASSES_MODELCUTS_H

#include "dialects/cpc/Cost.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <vector>

namespace cpc {

/// The ops of `func` that depend on input data, in program order (parameters, constants and
/// what is computed from them alone are not among them).
llvm::SmallVector<mlir::Operation *> dataOps(mlir::func::FuncOp func);

/// Bytes live across each position k (between ops k-1 and k) of `ops`: a value of op i read by
/// op j > i (or by anything outside `ops`) crosses every position in (i, j].
std::vector<int64_t> crossingBytes(llvm::ArrayRef<mlir::Operation *> ops,
                                   const llvm::DenseMap<mlir::Operation *, size_t> &indexOf);

/// What each of the `count` data ops of `func` costs in the backward, found by differentiating
/// a copy of the module in which every data op is labelled with its index.
struct BackwardProbe {
  std::vector<double> seconds;      // its gradient ops' estimated seconds
  std::vector<int64_t> savedBytes;  // bytes of its results that the gradient reads (saved activations)
};

/// The probe of `func`'s data ops (zeros where the copy does not differentiate: the real
/// cpc-autodiff reports why).
BackwardProbe probeBackward(mlir::ModuleOp module, mlir::func::FuncOp func, size_t count, const CostProfile &profile);

} // namespace cpc

#endif
