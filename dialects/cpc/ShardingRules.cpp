//===- ShardingRules.cpp - the factor rule of each op ---------------------===//
#include "dialects/cpc/ShardingRules.h"
#include "dialects/cpc/CpcDialect.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace cpc {

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()).getShape(); }

/// Builds a rule dim by dim.
class RuleBuilder {
public:
  explicit RuleBuilder(Operation *op) {
    for (Value v : op->getOperands())
      rule_.operands.emplace_back(shapeOf(v).size(), ShardingRule::kNone);
    for (Value v : op->getResults())
      rule_.results.emplace_back(shapeOf(v).size(), ShardingRule::kNone);
  }
  int64_t factor() {
    rule_.reduction.push_back(false);
    return rule_.reduction.size() - 1;
  }
  void operand(unsigned i, int64_t dim, int64_t f) { rule_.operands[i][dim] = f; }
  void result(unsigned i, int64_t dim, int64_t f) { rule_.results[i][dim] = f; }
  ShardingRule finish() {
    // A factor no result carries is a reduction.
    for (int64_t f = 0; f < rule_.numFactors(); ++f) {
      bool inResult = false;
      for (auto &dims : rule_.results)
        inResult |= llvm::is_contained(dims, f);
      rule_.reduction[f] = !inResult;
    }
    return std::move(rule_);
  }

private:
  ShardingRule rule_;
};

/// Elementwise with numpy broadcasting: result dims are factors; an operand dim joins the
/// factor of the result dim it aligns with unless it is a broadcast 1.
ShardingRule elementwise(Operation *op, ArrayRef<int64_t> skipDims = {}) {
  RuleBuilder b(op);
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  SmallVector<int64_t> factors;
  for (int64_t d = 0; d < (int64_t)out.size(); ++d)
    factors.push_back(llvm::is_contained(skipDims, d) ? ShardingRule::kNone : b.factor());
  for (unsigned r = 0; r < op->getNumResults(); ++r)
    if (shapeOf(op->getResult(r)) == out)
      for (int64_t d = 0; d < (int64_t)out.size(); ++d)
        b.result(r, d, factors[d]);
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    ArrayRef<int64_t> in = shapeOf(op->getOperand(i));
    int64_t offset = out.size() - in.size();
    for (int64_t d = 0; d < (int64_t)in.size(); ++d)
      if (offset >= 0 && in[d] == out[d + offset] && in[d] != 1)
        b.operand(i, d, factors[d + offset]);
  }
  return b.finish();
}

ShardingRule matmul(MatMulOp op) {
  RuleBuilder b(op);
  SmallVector<int64_t> l(shapeOf(op.getLhs())), r(shapeOf(op.getRhs()));
  ArrayRef<int64_t> out = shapeOf(op.getResult());
  if (l.size() < 2 || r.size() < 2)
    return b.finish(); // vector products: keep whole
  int64_t lr = l.size(), rr = r.size(), orank = out.size();
  // Positions of M, K in lhs and K, N in rhs, as stored.
  int64_t lm = op.getTransposeLhs() ? lr - 1 : lr - 2, lk = op.getTransposeLhs() ? lr - 2 : lr - 1;
  int64_t rk = op.getTransposeRhs() ? rr - 1 : rr - 2, rn = op.getTransposeRhs() ? rr - 2 : rr - 1;
  int64_t m = b.factor(), n = b.factor(), k = b.factor();
  b.operand(0, lm, m);
  b.operand(0, lk, k);
  b.operand(1, rk, k);
  b.operand(1, rn, n);
  b.result(0, orank - 2, m);
  b.result(0, orank - 1, n);
  // Batch dims, right-aligned and broadcast.
  for (int64_t d = 0; d < orank - 2; ++d) {
    int64_t f = b.factor();
    b.result(0, d, f);
    int64_t ld = d - (orank - lr), rd = d - (orank - rr);
    if (ld >= 0 && l[ld] == out[d] && out[d] != 1)
      b.operand(0, ld, f);
    if (rd >= 0 && r[rd] == out[d] && out[d] != 1)
      b.operand(1, rd, f);
  }
  return b.finish();
}

template <typename ReduceOpT> ShardingRule reduce(ReduceOpT op) {
  RuleBuilder b(op);
  ArrayRef<int64_t> axes = op.getAxes();
  int64_t rank = shapeOf(op.getInput()).size(), out = 0;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t f = b.factor();
    b.operand(0, d, f);
    bool reduced = llvm::is_contained(axes, d);
    if (!reduced)
      b.result(0, out++, f);
    else if (op.getKeepdims())
      ++out; // a kept size-1 dim: whole
  }
  return b.finish();
}

/// Reshape: dims that keep their size and position in a group of equal products share a
/// factor; within a merge or split group only the major dims may (when their sizes match the
/// split), which covers [B, S, D] <-> [B*S, D] for batch sharding.
ShardingRule reshape(ReshapeOp op) {
  RuleBuilder b(op);
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  size_t i = 0, o = 0;
  while (i < in.size() && o < out.size()) {
    size_t i0 = i, o0 = o;
    int64_t pi = in[i++], po = out[o++];
    while (pi != po) {
      if (pi < po && i < in.size())
        pi *= in[i++];
      else if (o < out.size())
        po *= out[o++];
      else
        break;
    }
    if (pi != po)
      break;
    // The major (first non-unit) dims of the group carry the factor.
    size_t ii = i0, oo = o0;
    while (ii + 1 < i && in[ii] == 1)
      ++ii;
    while (oo + 1 < o && out[oo] == 1)
      ++oo;
    if (in[ii] != 1 && out[oo] != 1) {
      int64_t f = b.factor();
      b.operand(0, ii, f);
      b.result(0, oo, f);
    }
    // Trailing unit dims belong to no group.
    while (i < in.size() && in[i] == 1 && (o >= out.size() || out[o] != 1))
      ++i;
    while (o < out.size() && out[o] == 1 && (i >= in.size() || in[i] != 1))
      ++o;
  }
  return b.finish();
}

ShardingRule transpose(TransposeOp op) {
  RuleBuilder b(op);
  ArrayRef<int64_t> perm = op.getPermutation();
  for (int64_t d = 0; d < (int64_t)perm.size(); ++d) {
    int64_t f = b.factor();
    b.result(0, d, f);
    b.operand(0, perm[d], f);
  }
  return b.finish();
}

/// Dims that an op leaves whole-range (slice with full start/limit/stride 1, pad without padding).
template <typename Pred> ShardingRule passThroughDims(Operation *op, Pred keep) {
  RuleBuilder b(op);
  int64_t rank = shapeOf(op->getResult(0)).size();
  for (int64_t d = 0; d < rank; ++d)
    if (keep(d)) {
      int64_t f = b.factor();
      b.operand(0, d, f);
      b.result(0, d, f);
    }
  return b.finish();
}

/// Ops whose operands and results share leading dims [0, count): batch-like dims.
ShardingRule leadingDims(Operation *op, int64_t count, ArrayRef<unsigned> operandsWithDims,
                         ArrayRef<unsigned> resultsWithDims) {
  RuleBuilder b(op);
  for (int64_t d = 0; d < count; ++d) {
    int64_t f = b.factor();
    for (unsigned i : operandsWithDims)
      b.operand(i, d, f);
    for (unsigned r : resultsWithDims)
      b.result(r, d, f);
  }
  return b.finish();
}

} // namespace

std::optional<ShardingRule> getShardingRule(Operation *op) {
  using R = std::optional<ShardingRule>;
  return llvm::TypeSwitch<Operation *, R>(op)
      .Case<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqualOp, LessOp, LessEqualOp, GreaterOp,
            GreaterEqualOp, AndOp, OrOp, WhereOp, NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, ReciprocalOp, ErfOp,
            TanhOp, SigmoidOp, ReluOp, NotOp, GeluOp, CastOp, GeluGradOp, AdamWOp, ShardOp>(
          [](Operation *o) -> R { return elementwise(o); })
      .Case<SoftmaxOp, SoftmaxGradOp>([](Operation *o) -> R {
        return elementwise(o, {(int64_t)o->getAttrOfType<IntegerAttr>("axis").getInt()});
      })
      .Case<BroadcastOp>([](BroadcastOp o) -> R { return elementwise(o); })
      .Case<MatMulOp>([](MatMulOp o) -> R { return matmul(o); })
      .Case<ReduceSumOp>([](auto o) -> R { return reduce(o); })
      .Case<ReduceMeanOp>([](auto o) -> R { return reduce(o); })
      .Case<ReduceMaxOp>([](auto o) -> R { return reduce(o); })
      .Case<ReduceMinOp>([](auto o) -> R { return reduce(o); })
      .Case<ReduceProdOp>([](auto o) -> R { return reduce(o); })
      .Case<ReshapeOp>([](ReshapeOp o) -> R { return reshape(o); })
      .Case<TransposeOp>([](TransposeOp o) -> R { return transpose(o); })
      .Case<SliceOp>([](SliceOp o) -> R {
        ArrayRef<int64_t> in = shapeOf(o.getInput());
        return passThroughDims(o, [&](int64_t d) {
          return o.getStarts()[d] == 0 && o.getLimits()[d] == in[d] && o.getStrides()[d] == 1;
        });
      })
      .Case<PadOp>([](PadOp o) -> R {
        return passThroughDims(o, [&](int64_t d) {
          return o.getLow()[d] == 0 && o.getHigh()[d] == 0 && o.getInterior()[d] == 0;
        });
      })
      .Case<ConcatOp>([](ConcatOp o) -> R {
        int64_t axis = o.getAxis();
        RuleBuilder b(o);
        for (int64_t d = 0; d < (int64_t)shapeOf(o.getResult()).size(); ++d) {
          if (d == axis)
            continue;
          int64_t f = b.factor();
          b.result(0, d, f);
          for (unsigned i = 0; i < o->getNumOperands(); ++i)
            b.operand(i, d, f);
        }
        return b.finish();
      })
      .Case<LayerNormOp>([](LayerNormOp o) -> R { return leadingDims(o, o.getAxis(), {0}, {0}); })
      .Case<LayerNormGradOp>([](LayerNormGradOp o) -> R { return leadingDims(o, o.getAxis(), {0, 2}, {0}); })
      .Case<GatherElementsOp, GatherElementsGradOp>([](Operation *o) -> R {
        // Dims other than the axis line up between data/grad, indices and result.
        int64_t axis = o->getAttrOfType<IntegerAttr>("axis").getInt();
        ArrayRef<int64_t> in0 = shapeOf(o->getOperand(0)), in1 = shapeOf(o->getOperand(1)),
                          out = shapeOf(o->getResult(0));
        RuleBuilder b(o);
        for (int64_t d = 0; d < (int64_t)out.size(); ++d)
          if (d != axis && in0[d] == out[d] && in1[d] == out[d]) {
            int64_t f = b.factor();
            b.operand(0, d, f);
            b.operand(1, d, f);
            b.result(0, d, f);
          }
        return b.finish();
      })
      .Case<TopKOp, ArgSortOp>([](Operation *o) -> R {
        return elementwise(o, {(int64_t)o->getAttrOfType<IntegerAttr>("axis").getInt()});
      })
      .Case<GatherOp>([](GatherOp o) -> R {
        // result = data[:axis] + indices + data[axis+1:]: data dims other than the axis line up.
        RuleBuilder b(o);
        int64_t axis = o.getAxis(), idxRank = shapeOf(o.getIndices()).size();
        int64_t rank = shapeOf(o.getData()).size();
        for (int64_t d = 0; d < rank; ++d) {
          if (d == axis)
            continue;
          int64_t f = b.factor();
          b.operand(0, d, f);
          b.result(0, d < axis ? d : d - 1 + idxRank, f);
        }
        return b.finish();
      })
      .Case<GatherGradOp>([](GatherGradOp o) -> R {
        // The inverse layout of gather: grad dims other than the gathered ones line up.
        RuleBuilder b(o);
        int64_t axis = o.getAxis(), idxRank = shapeOf(o.getIndices()).size();
        int64_t rank = shapeOf(o.getResult()).size();
        for (int64_t d = 0; d < rank; ++d) {
          if (d == axis)
            continue;
          int64_t f = b.factor();
          b.result(0, d, f);
          b.operand(0, d < axis ? d : d - 1 + idxRank, f);
        }
        return b.finish();
      })
      .Case<Conv2DOp>([](Conv2DOp o) -> R {
        RuleBuilder b(o);
        int64_t n = b.factor(), out = b.factor(), c = b.factor();
        b.operand(0, 0, n);
        b.result(0, 0, n);
        b.operand(1, 0, out);
        b.result(0, 1, out);
        if (o.getGroups() == 1) {
          b.operand(0, 1, c);
          b.operand(1, 1, c);
        }
        if (o.getBias())
          b.operand(2, 0, out);
        return b.finish();
      })
      .Case<Conv2DGradWeightOp>([](Conv2DGradWeightOp o) -> R {
        RuleBuilder b(o);
        int64_t n = b.factor(); // the batch is summed over: a reduction
        b.operand(0, 0, n);
        b.operand(1, 0, n);
        return b.finish();
      })
      .Case<Conv2DGradInputOp>([](Conv2DGradInputOp o) -> R { return leadingDims(o, 1, {0}, {0}); })
      .Default([](Operation *) -> R { return std::nullopt; });
}

bool propagatesPartialSums(Operation *op, unsigned index) {
  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case<NegOp, ReshapeOp, TransposeOp, BroadcastOp, ReduceSumOp, SliceOp, ConcatOp, GatherOp, GatherElementsOp,
            GatherGradOp, GatherElementsGradOp, Conv2DGradWeightOp, Conv2DGradInputOp>([](Operation *) { return true; })
      .Case<PadOp>([](PadOp p) { return p.getValue().convertToDouble() == 0.0; })
      .Case<CastOp>([](CastOp c) { return llvm::isa<FloatType>(c.getType().getElementType()); })
      .Case<MulOp, MatMulOp>([](Operation *) { return true; }) // when the other operand is whole
      .Case<DivOp>([&](DivOp) { return index == 0; })
      .Case<AddOp, SubOp>([](Operation *) { return true; })   // when every operand is partial alike
      .Default([](Operation *) { return false; });
}

} // namespace cpc
