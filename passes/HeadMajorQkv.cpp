//===- HeadMajorQkv.cpp - fused qkv projections in head-major order -------===//
//
// A fused qkv Linear's output features are [3, H, Dh]: q's heads, then k's, then v's. Tensor
// parallelism splits heads, which would be a strided split of that dim; keeping the weight's
// rows (and the bias) in [H, 3, Dh] order makes it a block split instead. The parameters say
// so (stored_view/stored_perm), and the reshape to [.., 3, H, Dh] becomes a reshape to
// [.., H, 3, Dh] and a transpose: the model's value, computed from head-major parameters.
//
#include "dialects/cpc/Variables.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCHEADMAJORQKV
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// A parameter read once in the module, whose read has one use: permuting it changes no other use.
bool onlyUse(ParameterOp param, ModuleOp module) {
  if (!param || !param->hasOneUse() || param.getShardingAttr() || param.getStoredPermAttr())
    return false;
  return variableAccesses(module, param.getVariable()).size() == 1;
}

struct CpcHeadMajorQkvPass : cpc::impl::CpcHeadMajorQkvBase<CpcHeadMajorQkvPass> {
  using CpcHeadMajorQkvBase::CpcHeadMajorQkvBase;

  void runOnOperation() override {
    if (tp < 2)
      return;
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>()) {
      SmallVector<ReshapeOp> heads;
      func.walk([&](ReshapeOp r) { heads.push_back(r); });
      for (ReshapeOp r : heads)
        rewrite(getOperation(), r);
    }
  }

  /// `r` reshapes a Linear's output [.., 3*H*Dh] to [.., 3, H, Dh]: rewrite it when H divides
  /// by tp.
  void rewrite(ModuleOp module, ReshapeOp r) {
    ArrayRef<int64_t> in = r.getInput().getType().getShape(), out = r.getType().getShape();
    int64_t rank = in.size();
    if (rank < 1 || (int64_t)out.size() != rank + 2 || in.drop_back() != out.drop_back(3) || out[rank - 1] != 3)
      return;
    int64_t heads = out[rank], headDim = out[rank + 1];
    if (!r.getInput().hasOneUse())
      return;
    if (heads % tp) {
      mlir::emitRemark(r.getLoc()) << "attention with " << heads << " heads stays replicated: they do not split over tp="
                                   << (int64_t)tp;
      return;
    }
    // The Linear: a matmul by a 2-D parameter, then possibly a bias add.
    Value linear = r.getInput();
    ParameterOp bias;
    auto add = linear.getDefiningOp<AddOp>();
    if (add) {
      for (Value operand : {add.getLhs(), add.getRhs()})
        if (auto p = operand.getDefiningOp<ParameterOp>(); p && p.getType().getRank() == 1)
          bias = p;
      if (!bias)
        return;
      linear = add.getLhs() == bias.getResult() ? add.getRhs() : add.getLhs();
      if (!linear.hasOneUse())
        return;
    }
    auto mm = linear.getDefiningOp<MatMulOp>();
    if (!mm || mm.getTransposeLhs())
      return;
    auto weight = mm.getRhs().getDefiningOp<ParameterOp>();
    if (!weight || weight.getType().getRank() != 2 || !onlyUse(weight, module) || (bias && !onlyUse(bias, module)))
      return;
    int64_t features = 3 * heads * headDim;
    int64_t outDim = mm.getTransposeRhs() ? 0 : 1, inFeatures = weight.getType().getDimSize(1 - outDim);
    if (weight.getType().getDimSize(outDim) != features || (bias && bias.getType().getDimSize(0) != features))
      return;
    OpBuilder b(r);
    // Stored = transpose(reshape(model, view), perm): the [3, H] pair of the feature dim swapped.
    VariableOp w = weight.getVariable();
    if (outDim == 0) {
      w.setStoredViewAttr(b.getDenseI64ArrayAttr({3, heads, headDim, inFeatures}));
      w.setStoredPermAttr(b.getDenseI64ArrayAttr({1, 0, 2, 3}));
    } else {
      w.setStoredViewAttr(b.getDenseI64ArrayAttr({inFeatures, 3, heads, headDim}));
      w.setStoredPermAttr(b.getDenseI64ArrayAttr({0, 2, 1, 3}));
    }
    if (bias) {
      bias.getVariable().setStoredViewAttr(b.getDenseI64ArrayAttr({3, heads, headDim}));
      bias.getVariable().setStoredPermAttr(b.getDenseI64ArrayAttr({1, 0, 2}));
    }
    SmallVector<int64_t> headMajor(out.drop_back(3));
    headMajor.append({heads, 3, headDim});
    Type et = r.getType().getElementType();
    Value grouped = b.create<ReshapeOp>(r.getLoc(), RankedTensorType::get(headMajor, et), r.getInput());
    SmallVector<int64_t> perm;
    for (int64_t d = 0; d < rank + 2; ++d)
      perm.push_back(d == rank - 1 ? rank : d == rank ? rank - 1 : d);
    Value model = b.create<TransposeOp>(r.getLoc(), grouped, b.getDenseI64ArrayAttr(perm));
    r.getResult().replaceAllUsesWith(model);
    r.erase();
  }
};

} // namespace
