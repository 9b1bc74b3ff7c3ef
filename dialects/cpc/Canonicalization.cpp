//===- Canonicalization.cpp - cpc.add: sums of disjoint gather gradients ---===//
//
// Autodiff sums the gradients of a value's readers with adds. When the readers are scalar
// gathers of different slots of one axis (q, k and v taken out of a fused qkv projection:
// gather(x, 0|1|2, axis)), each gather_grad writes a whole zero tensor with one slot filled, and
// the adds read and write the whole tensor again per term. The sum is the slots side by side: a
// concat of the slot gradients (zeros for slots nobody gathered), written once.
//
#include "dialects/cpc/CpcDialect.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;

namespace cpc {
namespace {

/// The gradient of a gather of one slot: gather_grad(grad, constant scalar index) along `axis`
/// of a `dimSize` long dim, no block axes.
struct Slot {
  int64_t index;
  Value grad;
};

struct SlotTree {
  int64_t axis = -1, dimSize = -1;
  SmallVector<Slot> slots;
};

/// Adds v's slots to `tree` when v is a slot gradient, or an add (read only by the tree) of such
/// sums, all of the root's type and one axis and dim size; false otherwise.
bool collect(Value v, Type type, SlotTree &tree) {
  if (v.getType() != type || !v.hasOneUse())
    return false;
  if (auto add = v.getDefiningOp<AddOp>())
    return collect(add.getLhs(), type, tree) && collect(add.getRhs(), type, tree);
  auto g = v.getDefiningOp<GatherGradOp>();
  DenseIntElementsAttr index;
  if (!g || g.getBlockAxes() || !matchPattern(g.getIndices(), m_Constant(&index)) || index.getType().getRank() != 0)
    return false;
  if (tree.axis >= 0 && (tree.axis != (int64_t)g.getAxis() || tree.dimSize != (int64_t)g.getDimSize()))
    return false;
  tree.axis = g.getAxis();
  tree.dimSize = g.getDimSize();
  int64_t i = index.getSplatValue<APInt>().getSExtValue();
  i = i < 0 ? i + tree.dimSize : i;
  if (i < 0 || i >= tree.dimSize || llvm::any_of(tree.slots, [&](const Slot &s) { return s.index == i; }))
    return false; // out of range (the kernel reports it) or a slot twice (a real sum)
  tree.slots.push_back({i, g.getGrad()});
  return true;
}

/// Whether `add`'s operands are both slot trees; fills `tree`.
bool slotSum(AddOp add, SlotTree &tree) {
  Type type = add.getType();
  return add.getLhs().getType() == type && add.getRhs().getType() == type && collect(add.getLhs(), type, tree) &&
         collect(add.getRhs(), type, tree);
}

struct ConcatDisjointGatherGrads : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    SlotTree tree;
    if (!slotSum(add, tree))
      return failure();
    // Only the whole tree: an add that an enclosing sum would take in is left to it.
    if (add->hasOneUse())
      if (auto outer = llvm::dyn_cast<AddOp>(*add->user_begin())) {
        SlotTree whole;
        if (slotSum(outer, whole))
          return failure();
      }
    auto type = llvm::cast<RankedTensorType>(add.getType());
    SmallVector<int64_t> pieceShape(type.getShape());
    pieceShape[tree.axis] = 1;
    auto pieceType = type.clone(pieceShape);
    SmallVector<Value> pieces(tree.dimSize);
    for (const Slot &s : tree.slots)
      pieces[s.index] = rewriter.create<ReshapeOp>(add.getLoc(), pieceType, s.grad);
    for (Value &p : pieces)
      if (!p)
        p = rewriter.create<ConstantOp>(add.getLoc(), DenseElementsAttr::get(pieceType, rewriter.getZeroAttr(type.getElementType())));
    rewriter.replaceOpWithNewOp<ConcatOp>(add, pieces, rewriter.getI64IntegerAttr(tree.axis));
    return success();
  }
};

} // namespace

void AddOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<ConcatDisjointGatherGrads>(context);
}

} // namespace cpc
