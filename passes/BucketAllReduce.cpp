//===- BucketAllReduce.cpp - merge consecutive reductions into buckets -----===//
#include "passes/BucketLayout.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
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
  auto merged = b.create<AllReduceOp>(last.getLoc(), inputs, last.getMeshAttr(), last.getMeshAxesAttr());
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
                                         last.getMeshAxesAttr());
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
/// or null to skip the op) into buckets of at most `limit` input bytes, with `merge`: one bucket
/// per element type, mesh and axes at a time (mixed precision interleaves 16-bit and f32
/// gradients). A bucket is closed before an op that uses one of its members (so every use still
/// sees the sum; an op moved down that does closes them all), and when it is full; each is
/// issued where its last member stood.
template <typename OpT, typename InputFn, typename MergeFn>
void bucketReductions(FunctionOpInterface func, int64_t limit, InputFn input, MergeFn merge) {
  struct Bucket {
    SmallVector<OpT> members;
    int64_t bytes = 0;
  };
  // Keyed by what must agree inside a bucket; a vector keeps the issue order deterministic.
  SmallVector<std::pair<std::tuple<Type, Attribute, Attribute>, Bucket>> open;
  llvm::SmallPtrSet<Operation *, 16> pending;
  auto flush = [&](Bucket &bucket) {
    merge(ArrayRef<OpT>(bucket.members));
    for (OpT op : bucket.members)
      pending.erase(op);
    bucket = Bucket();
  };
  auto flushAll = [&]() {
    for (auto &entry : open)
      if (!entry.second.members.empty())
        flush(entry.second);
  };
  SmallVector<Operation *> ops;
  for (Operation &op : func.getFunctionBody().front())
    ops.push_back(&op);
  // Pure ops that read a pending member, moved down to right before their first user (the cast
  // of a reduced 16-bit gradient to f32 for the update): the bucket stays open until that user.
  llvm::SmallPtrSet<Operation *, 16> sunk;
  auto uses = [](Operation *op, const llvm::SmallPtrSet<Operation *, 16> &set) {
    return llvm::any_of(op->getOperands(), [&](Value v) { return v.getDefiningOp() && set.count(v.getDefiningOp()); });
  };
  for (Operation *op : ops) {
    if (uses(op, pending) && !uses(op, sunk) && isPure(op) && op->getNumResults() > 0 && !op->use_empty()) {
      Operation *first = nullptr;
      for (Operation *user : op->getUsers())
        if (user->getBlock() == op->getBlock() && (!first || user->isBeforeInBlock(first)))
          first = user;
      if (first && llvm::all_of(op->getUsers(), [&](Operation *u) { return u->getBlock() == op->getBlock(); })) {
        op->moveBefore(first);
        sunk.insert(op);
        continue;
      }
    }
    // An op moved down that reads a member needs every sum now; an op reading members needs
    // theirs: only their buckets close, so a tp all-reduce the backward reads at once (or a
    // recompute copy of a forward one) leaves the dp gradients' buckets as they were.
    if (uses(op, sunk)) {
      flushAll();
      sunk.clear();
    } else if (uses(op, pending)) {
      for (auto &entry : open)
        if (llvm::any_of(entry.second.members, [&](OpT member) {
              return llvm::any_of(member->getResults(), [&](Value r) { return llvm::is_contained(op->getOperands(), r); });
            }))
          flush(entry.second);
    }
    auto reduction = llvm::dyn_cast<OpT>(op);
    Value in = reduction ? input(reduction) : Value();
    if (!in)
      continue;
    auto type = llvm::cast<RankedTensorType>(in.getType());
    int64_t size = type.getNumElements() * std::max<int64_t>(type.getElementTypeBitWidth() / 8, 1);
    auto key = std::make_tuple(type.getElementType(), Attribute(reduction.getMeshAxesAttr()),
                               Attribute(reduction.getMeshAttr()));
    auto it = llvm::find_if(open, [&](const auto &entry) { return entry.first == key; });
    if (it == open.end()) {
      open.push_back({key, Bucket()});
      it = std::prev(open.end());
    }
    Bucket &bucket = it->second;
    if (!bucket.members.empty() && bucket.bytes + size > limit)
      flush(bucket);
    bucket.members.push_back(reduction);
    pending.insert(reduction);
    bucket.bytes += size;
  }
  flushAll();
}

struct CpcBucketAllReducePass : cpc::impl::CpcBucketAllReduceBase<CpcBucketAllReducePass> {
  using CpcBucketAllReduceBase::CpcBucketAllReduceBase;
  void runOnOperation() override {
    FunctionOpInterface func = getOperation();
    if (func.isExternal())
      return;
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
};

} // namespace
