//===- BucketAllGather.cpp - merge variable-updating all-gathers into buckets ===//
#include "passes/BucketLayout.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace cpc {
#define GEN_PASS_DEF_CPCBUCKETALLGATHER
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// The ops that consume `v` when every use is a reshape chain ending in assigns (so they may
/// move later), in no particular order; failure otherwise.
LogicalResult collectAssignChain(Value v, llvm::SetVector<Operation *> &chain) {
  for (Operation *user : v.getUsers()) {
    if (llvm::isa<AssignOp>(user)) {
      chain.insert(user);
    } else if (auto reshape = llvm::dyn_cast<ReshapeOp>(user)) {
      chain.insert(user);
      if (failed(collectAssignChain(reshape.getResult(), chain)))
        return failure();
    } else {
      return failure();
    }
  }
  return success();
}

struct Member {
  AllGatherOp gather;
  llvm::SetVector<Operation *> chain;
};

/// Replaces the gathers of `bucket` by one gather of their concatenated blocks (each flattened
/// with its gather dim first), issued where the last of them stood, and moves their assign
/// chains after it.
void mergeBucket(MutableArrayRef<Member> bucket) {
  if (bucket.size() < 2)
    return;
  AllGatherOp last = bucket.back().gather;
  OpBuilder b(last);
  b.setInsertionPointAfter(last);
  Location loc = last.getLoc();
  auto elementType = last.getInput().getType().getElementType();
  int64_t dim = last.getGatherDim();
  int64_t ranks = last.getType().getDimSize(dim) / last.getInput().getType().getDimSize(dim), blockElements = 0;
  SmallVector<Value> blocks;
  for (Member &m : bucket) {
    int64_t n = m.gather.getInput().getType().getNumElements();
    Value input = withDimFirst(b, loc, m.gather.getInput(), m.gather.getGatherDim());
    blocks.push_back(b.create<ReshapeOp>(loc, RankedTensorType::get({n}, elementType), input));
    blockElements += n;
  }
  Value packed = b.create<ConcatOp>(loc, RankedTensorType::get({blockElements}, elementType), blocks,
                                    b.getI64IntegerAttr(0));
  Value gathered = b.create<AllGatherOp>(loc, RankedTensorType::get({ranks * blockElements}, elementType), packed,
                                         last.getMeshAttr(), last.getMeshAxesAttr());
  // Row r of [ranks, blockElements] is rank r's packed blocks; member i is a column range.
  Value byRank = b.create<ReshapeOp>(loc, RankedTensorType::get({ranks, blockElements}, elementType), gathered);
  // Each parameter's slice is followed right away by its assigns, so that it is written into the
  // variable and freed before the next one is sliced.
  int64_t offset = 0;
  for (Member &m : bucket) {
    int64_t block = m.gather.getInput().getType().getNumElements();
    Value columns = b.create<SliceOp>(loc, RankedTensorType::get({ranks, block}, elementType), byRank,
                                      b.getDenseI64ArrayAttr({0, offset}),
                                      b.getDenseI64ArrayAttr({ranks, offset + block}), b.getDenseI64ArrayAttr({1, 1}));
    // [ranks, block] holds the gathered value with its gather dim first, rank-major.
    Value whole = fromDimFirst(b, loc, columns, m.gather.getType(), m.gather.getGatherDim());
    m.gather.getResult().replaceAllUsesWith(whole);
    SmallVector<Operation *> chain(m.chain.begin(), m.chain.end());
    llvm::sort(chain, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); }); // reshape before assign
    // Only ops that stood before the bucket move (after it); one already later stays, so no assign
    // moves earlier, past a read of its variable.
    Operation *cursor = whole.getDefiningOp();
    for (Operation *op : chain) {
      if (!op->isBeforeInBlock(cursor))
        continue;
      op->moveAfter(cursor);
      cursor = op;
    }
    b.setInsertionPointAfter(cursor);
    offset += block;
  }
  for (Member &m : bucket)
    m.gather.erase();
}

void bucketAllGathers(FunctionOpInterface func, int64_t limit) {
  SmallVector<Member> bucket;
  int64_t bytes = 0;
  SmallVector<AllGatherOp> gathers;
  func.walk([&](AllGatherOp op) { gathers.push_back(op); });
  for (AllGatherOp op : gathers) {
    if (op->getBlock() != &func.getFunctionBody().front() || op.getInput().getType().getNumElements() == 0)
      continue;
    Member m{op, {}};
    if (failed(collectAssignChain(op.getResult(), m.chain)) || m.chain.empty())
      continue;
    auto type = op.getType();
    int64_t size = type.getNumElements() * std::max<int64_t>(type.getElementTypeBitWidth() / 8, 1);
    if (!bucket.empty() && (bytes + size > limit || bucket.front().gather.getMeshAxesAttr() != op.getMeshAxesAttr() ||
                            bucket.front().gather.getMeshAttr() != op.getMeshAttr() ||
                            bucket.front().gather.getType().getElementType() != type.getElementType())) {
      mergeBucket(bucket);
      bucket.clear();
      bytes = 0;
    }
    bucket.push_back(std::move(m));
    bytes += size;
  }
  mergeBucket(bucket);
}

struct CpcBucketAllGatherPass : cpc::impl::CpcBucketAllGatherBase<CpcBucketAllGatherPass> {
  using CpcBucketAllGatherBase::CpcBucketAllGatherBase;
  void runOnOperation() override {
    if (bucketBytes > 0 && !getOperation().isExternal())
      bucketAllGathers(getOperation(), bucketBytes);
  }
};

} // namespace
