//===- BucketLayout.h - flat views of blocks for bucketed collectives -----===//
//
// A bucketed collective moves one flat buffer: every member's value is viewed with its
// collective dim first (a transpose unless it is dim 0), so that each rank's block is one
// contiguous run, and turned back afterwards.
//
#ifndef CPC_PASSES_BUCKETLAYOUT_H
#define CPC_PASSES_BUCKETLAYOUT_H

#include "dialects/cpc/CpcDialect.h"

#include "mlir/IR/Builders.h"

namespace cpc {

/// The permutation that brings dim `dim` of a rank-`rank` value to the front.
inline llvm::SmallVector<int64_t> dimFirstPermutation(int64_t rank, int64_t dim) {
  llvm::SmallVector<int64_t> perm{dim};
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim)
      perm.push_back(d);
  return perm;
}

/// `v` with dim `dim` moved to the front (v itself for dim 0).
inline mlir::Value withDimFirst(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, int64_t dim) {
  if (dim == 0)
    return v;
  auto type = llvm::cast<mlir::RankedTensorType>(v.getType());
  llvm::SmallVector<int64_t> perm = dimFirstPermutation(type.getRank(), dim), shape;
  for (int64_t p : perm)
    shape.push_back(type.getDimSize(p));
  return b.create<TransposeOp>(loc, mlir::RankedTensorType::get(shape, type.getElementType()), v,
                               b.getDenseI64ArrayAttr(perm));
}

/// The inverse of withDimFirst: `flat` (the elements of a value of type `type` with dim `dim`
/// first) as a value of `type`.
inline mlir::Value fromDimFirst(mlir::OpBuilder &b, mlir::Location loc, mlir::Value flat, mlir::RankedTensorType type,
                                int64_t dim) {
  llvm::SmallVector<int64_t> perm = dimFirstPermutation(type.getRank(), dim), shape, inverse(type.getRank());
  for (auto [i, p] : llvm::enumerate(perm)) {
    shape.push_back(type.getDimSize(p));
    inverse[p] = i;
  }
  auto shaped = mlir::RankedTensorType::get(shape, type.getElementType());
  mlir::Value v = flat.getType() == shaped ? flat : b.create<ReshapeOp>(loc, shaped, flat).getResult();
  if (dim == 0)
    return v;
  return b.create<TransposeOp>(loc, type, v, b.getDenseI64ArrayAttr(inverse));
}

} // namespace cpc

#endif // CPC_PASSES_BUCKETLAYOUT_H
