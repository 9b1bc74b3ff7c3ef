//===- UpdatePlacement.h - where a parameter's update is split over dp ----===//
//
// ZeRO splits an AdamW update over dp on the first dim of the parameter that tensor parallelism
// left whole and that divides by dp; the global gradient norm's terms are split the same way on
// every dp plan (by cpc-zero, or cpc-split-grad-norm without ZeRO), so that each rank squares one
// block and the ranks' shares are summed by one all-reduce, as ZeRO-2 must: the norm, and so the
// clip, then come out the same bits with or without ZeRO.
//
#ifndef CPC_PASSES_UPDATEPLACEMENT_H
#define CPC_PASSES_UPDATEPLACEMENT_H

#include "passes/Sharding.h"

#include <optional>

namespace cpc {

/// After every tensor-parallel seed (parameters 1, sequence-parallel regions 2): ZeRO and the
/// norm's split only split dims that those left whole.
inline constexpr int64_t kZeroPriority = 8;

/// The layout a parameter read has been given by the passes before (its tp split), or whole, with
/// that seed's priority.
std::pair<Layout, int64_t> parameterReadLayout(ParameterOp param);

/// The layout `update` is split as over `axis` (`ranks` ranks): its parameter's read layout with
/// `axis` on the first dim it leaves whole whose size divides by `ranks`. None when the update
/// does not update a parameter read, the read uses `axis` already, or no dim divides.
std::optional<Layout> updateSplit(AdamWOp update, llvm::StringRef axis, int64_t ranks);

/// `x` when `v` is x * s or s * x with s a scalar (rank 0) and x not: a gradient scaled by the
/// clip, by fp16's unscale, or by 1/accumulation. Null otherwise.
mlir::Value scaledOperand(mlir::Value v);

/// Seeds the squares of `update`'s gradient in the global norm (g * g, where g is the gradient or
/// what it is a scale of, through any number of scales) laid out as `layout`: each rank squares
/// its block, and the norm's term stays a partial sum until the norm's one all-reduce. Returns
/// the squares.
llvm::SmallVector<MulOp> seedNormSquares(AdamWOp update, const Layout &layout, const Mesh &mesh);

} // namespace cpc

#endif
