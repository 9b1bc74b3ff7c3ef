//===- BucketAllReduce.cpp - merge consecutive all-reduces into buckets ----===//
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

/// Merges the single-value all-reduces of `func` into buckets of at most `limit` bytes. A bucket
/// is closed before an op that uses one of its members (so every use still sees the sum) and
/// when the element type changes; it is issued where its last member stood.
void bucketAllReduces(func::FuncOp func, int64_t limit) {
  SmallVector<AllReduceOp> bucket;
  int64_t bytes = 0;
  llvm::SmallPtrSet<Operation *, 16> members;
  auto flush = [&]() {
    if (bucket.size() > 1) {
      AllReduceOp last = bucket.back();
      OpBuilder b(last);
      b.setInsertionPointAfter(last);
      SmallVector<Value> inputs;
      for (AllReduceOp op : bucket)
        inputs.push_back(op.getInputs().front());
      auto merged = b.create<AllReduceOp>(last.getLoc(), inputs, last.getMeshAttr(), last.getAxesAttr());
      for (auto [i, op] : llvm::enumerate(bucket)) {
        op.getResult(0).replaceAllUsesWith(merged.getResult(i));
        op.erase();
      }
    }
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
    auto ar = llvm::dyn_cast<AllReduceOp>(op);
    if (!ar || ar.getInputs().size() != 1)
      continue;
    auto type = llvm::cast<RankedTensorType>(ar.getInputs().front().getType());
    int64_t size = type.getNumElements() * std::max<int64_t>(type.getElementTypeBitWidth() / 8, 1);
    if (!bucket.empty() && (bytes + size > limit || bucket.front().getInputs().front().getType().cast<RankedTensorType>().getElementType() != type.getElementType() ||
                            bucket.front().getAxesAttr() != ar.getAxesAttr()))
      flush();
    bucket.push_back(ar);
    members.insert(ar);
    bytes += size;
  }
  flush();
}

struct CpcBucketAllReducePass : cpc::impl::CpcBucketAllReduceBase<CpcBucketAllReducePass> {
  using CpcBucketAllReduceBase::CpcBucketAllReduceBase;
  void runOnOperation() override {
    if (bucketBytes > 0)
      for (auto func : getOperation().getOps<func::FuncOp>())
        bucketAllReduces(func, bucketBytes);
  }
};

} // namespace
