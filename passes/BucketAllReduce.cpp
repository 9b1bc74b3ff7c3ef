//===- BucketAllReduce.cpp - merge consecutive reductions into buckets -----===//
#include "passes/BucketLayout.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace cpc {
#define GEN_PASS_DEF_CPCBUCKETALLREDUCE
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// Issues an all-reduce bucket as one all-reduce of all its members, where the last one stood.
void mergeAllReduces(ArrayRef<AllReduceOp> bucket) {
  if (bucket.size() < 2)
    return;
  AllReduceOp last = bucket.back();
  OpBuilder b(last);
  b.setInsertionPointAfter(last);
  SmallVector<Value> inputs;
  for (AllReduceOp op : bucket)
    inputs.push_back(op.getInputs().front());
  auto merged = b.create<AllReduceOp>(last.getLoc(), inputs, last.getMeshAttr(), last.getAxesAttr());
  for (auto [i, member] : llvm::enumerate(bucket)) {
    AllReduceOp op = member;
    op.getResult(0).replaceAllUsesWith(merged.getResult(i));
    op.erase();
  }
}

/// Replaces the reduce-scatters of `bucket` by one over their blocks laid side by side: input
/// i, its scatter dim first, viewed as [ranks, n_i / ranks] and concatenated along dim 1, so
/// that rank r's block of the merged sum is its blocks of every member, sliced apart afterwards.
void mergeReduceScatters(ArrayRef<ReduceScatterOp> bucket) {
  if (bucket.size() < 2)
    return;
  ReduceScatterOp last = bucket.back();
  OpBuilder b(last);
  b.setInsertionPointAfter(last);
  Location loc = last.getLoc();
  Type et = last.getType().getElementType();
  int64_t dim = last.getScatterDim();
  int64_t ranks = last.getInput().getType().getDimSize(dim) / last.getType().getDimSize(dim), total = 0;
  SmallVector<Value> columns;
  for (ReduceScatterOp op : bucket) {
    int64_t block = op.getType().getNumElements();
    Value input = withDimFirst(b, loc, op.getInput(), op.getScatterDim());
    columns.push_back(b.create<ReshapeOp>(loc, RankedTensorType::get({ranks, block}, et), input));
    total += block;
  }
  Value side = b.create<ConcatOp>(loc, RankedTensorType::get({ranks, total}, et), columns, b.getI64IntegerAttr(1));
  Value flat = b.create<ReshapeOp>(loc, RankedTensorType::get({ranks * total}, et), side);
  Value mine = b.create<ReduceScatterOp>(loc, RankedTensorType::get({total}, et), flat, last.getMeshAttr(),
                                         last.getAxesAttr());
  int64_t offset = 0;
  for (ReduceScatterOp op : bucket) {
    int64_t block = op.getType().getNumElements();
    Value part = b.create<SliceOp>(loc, RankedTensorType::get({block}, et), mine, b.getDenseI64ArrayAttr({offset}),
                                   b.getDenseI64ArrayAttr({offset + block}), b.getDenseI64ArrayAttr({1}));
    op.getResult().replaceAllUsesWith(fromDimFirst(b, loc, part, op.getType(), op.getScatterDim()));
    op.erase();
    offset += block;
  }
}

/// Merges the collectives of kind `OpT` that `input(op)` accepts (returning the value reduced,
/// or null to skip the op) into buckets of at most `limit` input bytes, with `merge`. A bucket
/// is closed before an op that uses one of its members (so every use still sees the sum) and
/// when the element type, mesh or axes change; it is issued where its last member stood.
template <typename OpT, typename InputFn, typename MergeFn>
void bucketReductions(func::FuncOp func, int64_t limit, InputFn input, MergeFn merge) {
  SmallVector<OpT> bucket;
  int64_t bytes = 0;
  llvm::SmallPtrSet<Operation *, 16> members;
  auto flush = [&]() {
    merge(ArrayRef<OpT>(bucket));
    bucket.clear();
    members.clear();
    bytes = 0;
  };
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front())
    ops.push_back(&op);
  for (Operation *op : ops) {
    // An op using a pending member needs the sum now.
    if (llvm::any_of(op->getOperands(), [&](Value v) { return v.getDefiningOp() && members.count(v.getDefiningOp()); }))
      flush();
    auto reduction = llvm::dyn_cast<OpT>(op);
    Value in = reduction ? input(reduction) : Value();
    if (!in)
      continue;
    auto type = llvm::cast<RankedTensorType>(in.getType());
    int64_t size = type.getNumElements() * std::max<int64_t>(type.getElementTypeBitWidth() / 8, 1);
    if (!bucket.empty()) {
      OpT first = bucket.front();
      if (bytes + size > limit || first.getAxesAttr() != reduction.getAxesAttr() ||
          first.getMeshAttr() != reduction.getMeshAttr() ||
          llvm::cast<RankedTensorType>(input(first).getType()).getElementType() != type.getElementType())
        flush();
    }
    bucket.push_back(reduction);
    members.insert(reduction);
    bytes += size;
  }
  flush();
}

struct CpcBucketAllReducePass : cpc::impl::CpcBucketAllReduceBase<CpcBucketAllReducePass> {
  using CpcBucketAllReduceBase::CpcBucketAllReduceBase;
  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (bucketBytes > 0)
        bucketReductions<AllReduceOp>(
            func, bucketBytes,
            [](AllReduceOp op) { // sums only: a max is a small value, rarely next to another
              return op.getInputs().size() == 1 && op.getKind() == ReductionKind::Sum ? op.getInputs().front()
                                                                                      : Value();
            },
            mergeAllReduces);
      // ZeRO-2/3 gradients (and sequence-parallel outputs): reduce-scatters with non-empty blocks.
      if (scatterBucketBytes > 0)
        bucketReductions<ReduceScatterOp>(
            func, scatterBucketBytes,
            [](ReduceScatterOp op) { return op.getType().getNumElements() > 0 ? op.getInput() : Value(); },
            mergeReduceScatters);
    }
  }
};

} // namespace
