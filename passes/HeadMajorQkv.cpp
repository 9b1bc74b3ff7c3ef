//===- HeadMajorQkv.cpp - fused qkv projections in head-major order -------===//
//
// A fused qkv Linear's output features are [3, H, Dh]: q's heads, then k's, then v's. Tensor
// parallelism splits heads, which would be a strided split of that dim; keeping the weight's
// rows (and the bias) in [H, 3, Dh] order makes it a block split instead. The parameters say
// so (stored_view/stored_perm), and the ops that take q, k and v apart are rewritten to take
// them from the head-major features: the model's values, computed from head-major parameters.
// Two ways of taking them apart are found: a reshape of the features into [.., 3, H, Dh]
// (torch's MultiheadAttention, timm, the project's models) and K equal slices of the features,
// each reshaped into [.., H, Dh] (Hugging Face GPT-2's c_attn and its split).
//
#include "dialects/cpc/Variables.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace cpc {
#define GEN_PASS_DEF_CPCHEADMAJORQKV
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// How many ops of the module refer to each symbol (one walk, not one per question).
using AccessCounts = llvm::DenseMap<StringAttr, int>;
AccessCounts countAccesses(ModuleOp module) {
  AccessCounts counts;
  if (std::optional<SymbolTable::UseRange> uses = SymbolTable::getSymbolUses(&module.getBodyRegion()))
    for (const SymbolTable::SymbolUse &use : *uses)
      ++counts[use.getSymbolRef().getRootReference()];
  return counts;
}

/// A parameter read once in the module, whose read has one use: permuting it changes no other use.
bool onlyUse(ParameterOp param, const AccessCounts &accesses) {
  if (!param || !param->hasOneUse() || param.getShardingAttr() || param.getStoredPermAttr())
    return false;
  return accesses.lookup(param.getNameAttr().getAttr()) == 1;
}

/// A Linear by a 2-D parameter (x @ W or x @ W^T), possibly plus a 1-D parameter bias.
struct FusedLinear {
  ParameterOp weight, bias;
  int64_t outDim = 0; // the weight's dim of output features
};

/// The Linear whose `features` outputs `out` is (the matmul, or the bias add after it), when
/// its parameters are used by it alone.
std::optional<FusedLinear> matchLinear(Value out, int64_t features, const AccessCounts &accesses) {
  FusedLinear linear;
  Value product = out;
  if (auto add = out.getDefiningOp<AddOp>()) {
    for (Value operand : {add.getLhs(), add.getRhs()})
      if (auto p = operand.getDefiningOp<ParameterOp>(); p && p.getType().getRank() == 1)
        linear.bias = p;
    if (!linear.bias)
      return std::nullopt;
    product = add.getLhs() == linear.bias.getResult() ? add.getRhs() : add.getLhs();
    if (!product.hasOneUse())
      return std::nullopt;
  }
  auto mm = product.getDefiningOp<MatMulOp>();
  if (!mm || mm.getTransposeLhs())
    return std::nullopt;
  linear.weight = mm.getRhs().getDefiningOp<ParameterOp>();
  if (!linear.weight || linear.weight.getType().getRank() != 2 || !onlyUse(linear.weight, accesses) ||
      (linear.bias && !onlyUse(linear.bias, accesses)))
    return std::nullopt;
  linear.outDim = mm.getTransposeRhs() ? 0 : 1;
  if (linear.weight.getType().getDimSize(linear.outDim) != features ||
      (linear.bias && linear.bias.getType().getDimSize(0) != features))
    return std::nullopt;
  return linear;
}

/// Stores the Linear's output features, [parts, heads, headDim] in the model, as [heads, parts,
/// headDim]: stored = transpose(reshape(model, view), perm).
void storeHeadMajor(FusedLinear linear, int64_t parts, int64_t heads, int64_t headDim, OpBuilder &b) {
  VariableOp w = linear.weight.getVariable();
  int64_t inFeatures = linear.weight.getType().getDimSize(1 - linear.outDim);
  if (linear.outDim == 0) {
    w.setStoredViewAttr(b.getDenseI64ArrayAttr({parts, heads, headDim, inFeatures}));
    w.setStoredPermAttr(b.getDenseI64ArrayAttr({1, 0, 2, 3}));
  } else {
    w.setStoredViewAttr(b.getDenseI64ArrayAttr({inFeatures, parts, heads, headDim}));
    w.setStoredPermAttr(b.getDenseI64ArrayAttr({0, 2, 1, 3}));
  }
  if (linear.bias) {
    linear.bias.getVariable().setStoredViewAttr(b.getDenseI64ArrayAttr({parts, heads, headDim}));
    linear.bias.getVariable().setStoredPermAttr(b.getDenseI64ArrayAttr({1, 0, 2}));
  }
}

/// `features` ([.., parts*heads*headDim], head-major) as the model's [.., parts, heads, headDim]:
/// a reshape to [.., heads, parts, headDim] and a transpose.
Value modelOrder(OpBuilder &b, Location loc, Value features, int64_t parts, int64_t heads, int64_t headDim) {
  auto type = llvm::cast<RankedTensorType>(features.getType());
  int64_t rank = type.getRank();
  SmallVector<int64_t> headMajor(type.getShape().drop_back());
  headMajor.append({heads, parts, headDim});
  Value grouped = b.create<ReshapeOp>(loc, RankedTensorType::get(headMajor, type.getElementType()), features);
  SmallVector<int64_t> perm;
  for (int64_t d = 0; d < rank + 2; ++d)
    perm.push_back(d == rank - 1 ? rank : d == rank ? rank - 1 : d);
  return b.create<TransposeOp>(loc, grouped, b.getDenseI64ArrayAttr(perm));
}

struct CpcHeadMajorQkvPass : cpc::impl::CpcHeadMajorQkvBase<CpcHeadMajorQkvPass> {
  using CpcHeadMajorQkvBase::CpcHeadMajorQkvBase;

  void runOnOperation() override {
    if (tp < 2)
      return;
    // Rewrites permute parameters and re-read no variable: the counts stay true throughout.
    accesses = countAccesses(getOperation());
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>()) {
      SmallVector<ReshapeOp> heads;
      llvm::SetVector<Value> sliced;
      func.walk([&](Operation *op) {
        if (auto r = llvm::dyn_cast<ReshapeOp>(op))
          heads.push_back(r);
        else if (auto s = llvm::dyn_cast<SliceOp>(op))
          sliced.insert(s.getInput());
      });
      for (ReshapeOp r : heads)
        rewriteReshape(r);
      for (Value v : sliced)
        rewriteSlices(v);
    }
  }

  AccessCounts accesses;

  bool headsDivide(Location loc, int64_t heads) {
    if (heads % tp == 0)
      return true;
    mlir::emitRemark(loc) << "attention with " << heads << " heads stays replicated: they do not split over tp="
                          << (int64_t)tp;
    return false;
  }

  /// `r` reshapes a Linear's output [.., 3*H*Dh] to [.., 3, H, Dh]: rewrite it when H divides
  /// by tp.
  void rewriteReshape(ReshapeOp r) {
    ArrayRef<int64_t> in = r.getInput().getType().getShape(), out = r.getType().getShape();
    int64_t rank = in.size();
    if (rank < 1 || (int64_t)out.size() != rank + 2 || in.drop_back() != out.drop_back(3) || out[rank - 1] != 3)
      return;
    int64_t heads = out[rank], headDim = out[rank + 1];
    if (!r.getInput().hasOneUse() || !headsDivide(r.getLoc(), heads))
      return;
    std::optional<FusedLinear> linear = matchLinear(r.getInput(), 3 * heads * headDim, accesses);
    if (!linear)
      return;
    OpBuilder b(r);
    storeHeadMajor(*linear, 3, heads, headDim, b);
    r.getResult().replaceAllUsesWith(modelOrder(b, r.getLoc(), r.getInput(), 3, heads, headDim));
    r.erase();
  }

  /// `v` ([.., F], a Linear's output, possibly with its leading dims reshaped) is used only by K
  /// equal slices of its last dim, each reshaped into [.., H, Dh] alike: q, k and v taken apart.
  /// Each slice becomes part j of the model-order [.., K, H, Dh] features, taken by a slice of
  /// the K dim, whose H stays split.
  void rewriteSlices(Value v) {
    auto type = llvm::cast<RankedTensorType>(v.getType());
    int64_t rank = type.getRank(), features = rank ? type.getDimSize(rank - 1) : 0;
    SmallVector<SliceOp> parts;
    for (Operation *user : v.getUsers()) {
      auto s = llvm::dyn_cast<SliceOp>(user);
      if (!s)
        return;
      parts.push_back(s);
    }
    int64_t k = parts.size();
    if (k < 2 || features % k)
      return;
    int64_t width = features / k, heads = 0, headDim = 0;
    std::vector<SliceOp> ordered(k);
    for (SliceOp s : parts) {
      ArrayRef<int64_t> starts = s.getStarts(), limits = s.getLimits(), strides = s.getStrides();
      for (int64_t d = 0; d + 1 < rank; ++d)
        if (starts[d] != 0 || limits[d] != type.getDimSize(d) || strides[d] != 1)
          return;
      int64_t j = starts[rank - 1] / width;
      if (starts[rank - 1] % width || limits[rank - 1] != starts[rank - 1] + width || strides[rank - 1] != 1 ||
          ordered[j] || !s->hasOneUse())
        return;
      ordered[j] = s;
      auto split = llvm::dyn_cast<ReshapeOp>(*s->getUsers().begin());
      ArrayRef<int64_t> out = split ? split.getType().getShape() : ArrayRef<int64_t>();
      if (!split || (int64_t)out.size() != rank + 1 || out.drop_back(2) != type.getShape().drop_back() ||
          (heads && (out[rank - 1] != heads || out[rank] != headDim)))
        return;
      heads = out[rank - 1];
      headDim = out[rank];
    }
    Value linearOut = v;
    if (auto r = v.getDefiningOp<ReshapeOp>(); r && r.getInput().getType().getShape().back() == features &&
                                                r.getInput().hasOneUse())
      linearOut = r.getInput();
    if (!headsDivide(v.getLoc(), heads))
      return;
    std::optional<FusedLinear> linear = matchLinear(linearOut, features, accesses);
    if (!linear)
      return;
    SliceOp first = *llvm::min_element(ordered, [](SliceOp a, SliceOp c) { return a->isBeforeInBlock(c); });
    OpBuilder b(first); // before every slice: their uses all come after it
    storeHeadMajor(*linear, k, heads, headDim, b);
    Value model = modelOrder(b, v.getLoc(), v, k, heads, headDim); // [.., K, H, Dh]
    auto modelType = llvm::cast<RankedTensorType>(model.getType());
    for (auto [j, s] : llvm::enumerate(ordered)) {
      SmallVector<int64_t> starts(rank + 2, 0), limits(modelType.getShape()), strides(rank + 2, 1);
      starts[rank - 1] = j;
      limits[rank - 1] = j + 1;
      Value part = b.create<SliceOp>(s.getLoc(), model, b.getDenseI64ArrayAttr(starts), b.getDenseI64ArrayAttr(limits),
                                     b.getDenseI64ArrayAttr(strides));
      s.getResult().replaceAllUsesWith(b.create<ReshapeOp>(s.getLoc(), s.getType(), part).getResult());
    }
    for (SliceOp s : ordered) // after the loop: the builder inserts before the first of them
      s.erase();
  }
};

} // namespace
