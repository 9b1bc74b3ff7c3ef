//===- ShapeRules.h - static shape rules shared by ops and the importer ---===//
#ifndef CPC_DIALECTS_CPC_SHAPERULES_H
#define CPC_DIALECTS_CPC_SHAPERULES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include <optional>

namespace cpc {

/// numpy broadcast of two shapes; std::nullopt when they are incompatible.
std::optional<llvm::SmallVector<int64_t>> broadcastShapes(llvm::ArrayRef<int64_t> a,
                                                          llvm::ArrayRef<int64_t> b);

/// True when `from` broadcasts (numpy rules, right-aligned) to exactly `to`.
bool isBroadcastableTo(llvm::ArrayRef<int64_t> from, llvm::ArrayRef<int64_t> to);

/// Result type of an elementwise binary op; i1 elements when `boolResult`.
mlir::LogicalResult inferBroadcastResult(std::optional<mlir::Location> loc, mlir::Type lhs,
                                         mlir::Type rhs, bool boolResult,
                                         llvm::SmallVectorImpl<mlir::Type> &inferred);

/// Result type of a reduction over `axes` (sorted, unique, in range).
mlir::LogicalResult inferReduceResult(std::optional<mlir::Location> loc, mlir::Type input,
                                      llvm::ArrayRef<int64_t> axes, bool keepdims,
                                      llvm::SmallVectorImpl<mlir::Type> &inferred);

/// Emits `message` at `loc` when there is one; always returns failure.
mlir::LogicalResult emitShapeError(std::optional<mlir::Location> loc, const llvm::Twine &message);

} // namespace cpc

#endif
