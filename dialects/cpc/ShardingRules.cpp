//===- ShardingRules.cpp - the factor rule of each op ---------------------===//
//
// One place per op for its ShardingRuleOpInterface methods: getShardingRule (the factors) and
// propagatesPartial (which partial operands it passes on). Elementwise ops use the interface's
// defaults (elementwiseShardingRule, no partial values).
//
#include "dialects/cpc/ShardingRules.h"
#include "dialects/cpc/CpcDialect.h"

#include <numeric>

using namespace mlir;

namespace cpc {

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()).getShape(); }

bool isSum(ReductionKind kind) { return kind == ReductionKind::Sum; }

/// Ops that only move or select elements pass partial values of any kind on; ops linear in an
/// operand pass partial sums only.
bool movesData(ReductionKind) { return true; }

ShardingRule matmulRule(MatMulOp op) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> l = shapeOf(op.getLhs()), r = shapeOf(op.getRhs()), out = shapeOf(op.getResult());
  if (l.size() < 2 || r.size() < 2)
    return b.finish(); // vector products: keep whole
  int64_t lr = l.size(), rr = r.size(), orank = out.size();
  // Positions of M, K in lhs and K, N in rhs, as stored.
  int64_t lm = op.getTransposeLhs() ? lr - 1 : lr - 2, lk = op.getTransposeLhs() ? lr - 2 : lr - 1;
  int64_t rk = op.getTransposeRhs() ? rr - 1 : rr - 2, rn = op.getTransposeRhs() ? rr - 2 : rr - 1;
  // Batch dims, right-aligned and broadcast.
  for (int64_t d = 0; d < orank - 2; ++d) {
    if (out[d] == 1)
      continue;
    int64_t f = b.factor(out[d]);
    b.result(0, d, f);
    int64_t ld = d - (orank - lr), rd = d - (orank - rr);
    if (ld >= 0 && l[ld] == out[d])
      b.operand(0, ld, f);
    if (rd >= 0 && r[rd] == out[d])
      b.operand(1, rd, f);
  }
  auto dimFactor = [&](int64_t size) { return size == 1 ? -1 : b.factor(size); };
  int64_t m = dimFactor(l[lm]), n = dimFactor(r[rn]), k = dimFactor(l[lk]);
  if (m >= 0) {
    b.operand(0, lm, m);
    b.result(0, orank - 2, m);
  }
  if (n >= 0) {
    b.operand(1, rn, n);
    b.result(0, orank - 1, n);
  }
  if (k >= 0 && l[lk] == r[rk]) {
    b.operand(0, lk, k);
    b.operand(1, rk, k);
  }
  return b.finish();
}

/// Attention and its gradient: the batch dims (batch, heads) split alike in every operand and
/// result; the query rows, the keys and the head dims stay whole (softmax needs every key, and
/// the key and value gradients sum over the query rows). Token-major q [..., N, H, D] has its
/// heads at dim -2; the probabilities [..., H, N, M] at dim -3.
template <typename AttentionOpT> ShardingRule attentionRule(AttentionOpT op) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> q = shapeOf(op.getQ());
  const int64_t rank = q.size(), batchDims = rank - (op.isTokenMajor() ? 3 : 2);
  // The probabilities: the forward op's result 1, the gradient's operand 3.
  const bool forward = std::is_same_v<AttentionOpT, AttentionOp>;
  auto split = [&](int64_t size, int64_t dim, int64_t probabilitiesDim) {
    if (size == 1)
      return;
    int64_t f = b.factor(size);
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      b.operand(i, !forward && i == 3 ? probabilitiesDim : dim, f);
    for (unsigned i = 0; i < op->getNumResults(); ++i)
      b.result(i, forward && i == 1 ? probabilitiesDim : dim, f);
  };
  for (int64_t d = 0; d < batchDims; ++d)
    split(q[d], d, d);
  if (op.isTokenMajor())
    split(q[rank - 2], rank - 2, batchDims);
  return b.finish();
}

/// A reduction over `axes`: sum and mean leave partial sums, max partial maxima; min and
/// product have no collective here, so their reduced dims stay whole.
template <typename ReduceOpT>
ShardingRule reduceRule(ReduceOpT op, std::optional<ReductionKind> kind) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> axes = op.getAxes(), in = shapeOf(op.getInput());
  int64_t out = 0;
  for (int64_t d = 0; d < (int64_t)in.size(); ++d) {
    bool reduced = llvm::is_contained(axes, d);
    if (in[d] != 1) {
      int64_t f = reduced ? b.factor(in[d], kind ? FactorKind::Reduction : FactorKind::NeedReplication,
                                     kind.value_or(ReductionKind::Sum))
                          : b.factor(in[d]);
      b.operand(0, d, f);
      if (!reduced)
        b.result(0, out, f);
    }
    if (!reduced || op.getKeepdims())
      ++out;
  }
  return b.finish();
}

/// Reshape: the dims of each group of equal products are factored into their common
/// refinement, taking the greatest common divisor of what is left of the current input and
/// output dims at each step ([B*N, D] -> [B, N, D]: B, N, D; [N, 3D] -> [N, 3, H, Dh]: the
/// input's last dim is 3, H, Dh). Where the rest of two dims is coprime the refinement stops
/// and the rest stays whole.
ShardingRule reshapeRule(ReshapeOp op) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> in = shapeOf(op.getInput()), out = shapeOf(op.getResult());
  if (llvm::is_contained(in, 0) || llvm::is_contained(out, 0))
    return b.finish();
  size_t i = 0, o = 0;
  auto skipUnit = [](ArrayRef<int64_t> shape, size_t &d) {
    while (d < shape.size() && shape[d] == 1)
      ++d;
  };
  skipUnit(in, i);
  skipUnit(out, o);
  int64_t restIn = i < in.size() ? in[i] : 1, restOut = o < out.size() ? out[o] : 1;
  while (i < in.size() && o < out.size()) {
    int64_t g = std::gcd(restIn, restOut);
    if (g == 1) {
      // Coprime rests: the rest of both dims is whole.
      b.operand(0, i, b.factor(restIn, FactorKind::NeedReplication));
      b.result(0, o, b.factor(restOut, FactorKind::NeedReplication));
      break;
    }
    int64_t f = b.factor(g);
    b.operand(0, i, f);
    b.result(0, o, f);
    restIn /= g;
    restOut /= g;
    if (restIn == 1) {
      ++i;
      skipUnit(in, i);
      restIn = i < in.size() ? in[i] : 1;
    }
    if (restOut == 1) {
      ++o;
      skipUnit(out, o);
      restOut = o < out.size() ? out[o] : 1;
    }
  }
  return b.finish();
}

/// Dims that `keep` says pass through unchanged (a slice over the whole range, a pad without
/// padding); the others are permutations, each side its own.
template <typename Pred> ShardingRule passThroughDims(Operation *op, Pred keep) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  for (int64_t d = 0; d < (int64_t)out.size(); ++d)
    if (keep(d) && out[d] != 1) {
      int64_t f = b.factor(out[d]);
      b.operand(0, d, f);
      b.result(0, d, f);
    }
  b.wholeDims(FactorKind::Permutation);
  return b.finish();
}

/// Ops whose listed operands and results share the leading dims [0, count) (a layer norm's
/// rows); every other dim needs replication.
ShardingRule leadingDims(Operation *op, int64_t count, ArrayRef<unsigned> operandsWithDims,
                         ArrayRef<unsigned> resultsWithDims) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> shape = shapeOf(op->getOperand(operandsWithDims.front()));
  for (int64_t d = 0; d < count; ++d) {
    if (shape[d] == 1)
      continue;
    int64_t f = b.factor(shape[d]);
    for (unsigned i : operandsWithDims)
      b.operand(i, d, f);
    for (unsigned r : resultsWithDims)
      b.result(r, d, f);
  }
  return b.finish();
}

/// gather_elements and its gradient: dims other than the axis line up between data (or grad),
/// indices and result.
/// The indexed dim of a gather's data may stay split (each rank gathers from its block, zeros
/// elsewhere, and the result is a partial sum) when that moves less than gathering the data:
/// for a stored table (vocab parallelism keeps it split) or when the result is under half the
/// data (a cross-entropy's target logits). Otherwise the dim needs replication.
bool gatherFromBlocks(Operation *op, Value data) {
  if (data.getDefiningOp<ParameterOp>())
    return true;
  auto in = llvm::cast<RankedTensorType>(data.getType()), out = llvm::cast<RankedTensorType>(op->getResultTypes()[0]);
  return 2 * out.getNumElements() < in.getNumElements();
}

/// gather_elements: result and indices have one shape, data the same but along `axis`;
/// `forward` false is its gradient (result has data's shape, operand 0 the gathered one).
/// The axis of the data: split forward, a partial sum (gatherFromBlocks); split in the
/// gradient's result, each rank adds the indices inside its block.
ShardingRule gatherElementsRule(Operation *op, int64_t axis, bool forward) {
  Value data = forward ? op->getOperand(0) : op->getResult(0);
  ArrayRef<int64_t> in0 = shapeOf(data), in1 = shapeOf(op->getOperand(1)),
                    out = forward ? shapeOf(op->getResult(0)) : shapeOf(op->getOperand(0));
  ShardingRuleBuilder b(op);
  for (int64_t d = 0; d < (int64_t)out.size(); ++d)
    if (d != axis && out[d] != 1 && in0[d] == out[d] && in1[d] == out[d]) {
      int64_t f = b.factor(out[d]);
      b.operand(forward ? 0 : 1, d, f);
      b.operand(forward ? 1 : 0, d, f);
      b.result(0, d, f);
    }
  if (in0[axis] != 1 && (!forward || gatherFromBlocks(op, data))) {
    int64_t f = b.factor(in0[axis]);
    forward ? b.operand(0, axis, f) : b.result(0, axis, f);
  }
  return b.finish();
}

/// gather: result = data[:axis] + indices + data[axis+1:]; `forward` false is its gradient,
/// whose result has data's shape and whose operand has the gathered one. The indexed dim as
/// in gatherElementsRule.
ShardingRule gatherRule(Operation *op, int64_t axis, Value indices, bool forward) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> data = forward ? shapeOf(op->getOperand(0)) : shapeOf(op->getResult(0));
  int64_t idxRank = shapeOf(indices).size();
  if (data[axis] != 1 && (!forward || gatherFromBlocks(op, op->getOperand(0)))) {
    int64_t f = b.factor(data[axis]);
    forward ? b.operand(0, axis, f) : b.result(0, axis, f);
  }
  // The indices' dims are the gathered value's dims axis.. (a batch split of the token ids
  // splits the lookups; in the gradient, each rank's scatter is a partial sum).
  ArrayRef<int64_t> idxShape = shapeOf(indices);
  for (int64_t i = 0; i < idxRank; ++i) {
    if (idxShape[i] == 1)
      continue;
    int64_t f = b.factor(idxShape[i]);
    b.operand(1, i, f); // the indices are operand 1 of both ops
    forward ? b.result(0, axis + i, f) : b.operand(0, axis + i, f);
  }
  for (int64_t d = 0; d < (int64_t)data.size(); ++d) {
    if (d == axis || data[d] == 1)
      continue;
    int64_t f = b.factor(data[d]);
    int64_t gathered = d < axis ? d : d - 1 + idxRank;
    if (forward) {
      b.operand(0, d, f);
      b.result(0, gathered, f);
    } else {
      b.result(0, d, f);
      b.operand(0, gathered, f);
    }
  }
  return b.finish();
}

} // namespace

//===----------------------------------------------------------------------===//
// Rules and the builder.
//===----------------------------------------------------------------------===//

bool ShardingRule::inOperands(int64_t f) const {
  return llvm::any_of(operands, [&](const TensorFactors &dims) {
    return llvm::any_of(dims, [&](const DimFactors &d) { return llvm::is_contained(d, f); });
  });
}

std::string ShardingRule::describe() const {
  auto name = [](int64_t f) {
    return f < 18 ? std::string(1, char('i' + f)) : "f" + std::to_string(f); // i..z, then f18...
  };
  auto tensors = [&](ArrayRef<TensorFactors> list) {
    std::string s = "(";
    for (size_t t = 0; t < list.size(); ++t) {
      s += t ? ", [" : "[";
      for (size_t d = 0; d < list[t].size(); ++d) {
        s += d ? ", " : "";
        for (int64_t f : list[t][d])
          s += name(f);
      }
      s += "]";
    }
    return s + ")";
  };
  std::string s = tensors(operands) + " -> " + tensors(results) + " {";
  for (int64_t f = 0; f < numFactors(); ++f)
    s += (f ? ", " : "") + name(f) + "=" + std::to_string(factors[f].size);
  s += "}";
  auto list = [&](FactorKind kind, StringRef label) {
    std::string names;
    for (int64_t f = 0; f < numFactors(); ++f)
      if (factors[f].kind == kind) {
        names += (names.empty() ? "" : ", ") + name(f);
        if (kind == FactorKind::Reduction && factors[f].reduction != ReductionKind::Sum)
          names += "(" + stringifyReductionKind(factors[f].reduction).str() + ")";
      }
    if (!names.empty())
      s += " " + label.str() + "={" + names + "}";
  };
  list(FactorKind::Reduction, "reduction");
  list(FactorKind::NeedReplication, "need_replication");
  list(FactorKind::Permutation, "permutation");
  return s;
}

ShardingRuleBuilder::ShardingRuleBuilder(Operation *op) : op_(op) {
  for (Value v : op->getOperands())
    rule_.operands.emplace_back(shapeOf(v).size());
  for (Value v : op->getResults())
    rule_.results.emplace_back(shapeOf(v).size());
}

int64_t ShardingRuleBuilder::factor(int64_t size, FactorKind kind, ReductionKind reduction) {
  rule_.factors.push_back({size, kind, reduction});
  return rule_.numFactors() - 1;
}

void ShardingRuleBuilder::wholeDims(FactorKind kind) {
  auto fill = [&](Value v, ShardingRule::TensorFactors &dims) {
    ArrayRef<int64_t> shape = shapeOf(v);
    for (size_t d = 0; d < dims.size(); ++d)
      if (dims[d].empty() && shape[d] > 1)
        dims[d].push_back(factor(shape[d], kind));
  };
  for (auto [v, dims] : llvm::zip(op_->getOperands(), rule_.operands))
    fill(v, dims);
  for (auto [v, dims] : llvm::zip(op_->getResults(), rule_.results))
    fill(v, dims);
}

ShardingRule ShardingRuleBuilder::finish() {
  wholeDims(FactorKind::NeedReplication);
  for (int64_t f = 0; f < rule_.numFactors(); ++f) {
    bool inResult = llvm::any_of(rule_.results, [&](const ShardingRule::TensorFactors &dims) {
      return llvm::any_of(dims, [&](const ShardingRule::DimFactors &d) { return llvm::is_contained(d, f); });
    });
    if (!inResult && rule_.factors[f].kind == FactorKind::PassThrough)
      rule_.factors[f].kind = FactorKind::Reduction;
  }
  return std::move(rule_);
}

std::optional<ShardingRule> getShardingRule(Operation *op) {
  auto iface = llvm::dyn_cast<ShardingRuleOpInterface>(op);
  if (!iface || llvm::any_of(op->getOperandTypes(), [](Type t) { return !llvm::isa<RankedTensorType>(t); }) ||
      llvm::any_of(op->getResultTypes(), [](Type t) { return !llvm::isa<RankedTensorType>(t); }))
    return std::nullopt;
  return iface.getShardingRule();
}

bool propagatesPartial(Operation *op, unsigned index, ReductionKind kind) {
  auto iface = llvm::dyn_cast<ShardingRuleOpInterface>(op);
  return iface && iface.propagatesPartial(index, kind);
}

std::string checkShardingRule(const ShardingRule &rule, Operation *op) {
  auto check = [&](Value v, const ShardingRule::TensorFactors &dims, StringRef what, unsigned i) -> std::string {
    ArrayRef<int64_t> shape = shapeOf(v);
    if (dims.size() != shape.size())
      return (what + " " + Twine(i) + " has " + Twine(dims.size()) + " dims in the rule, " + Twine(shape.size()) +
              " in its type")
          .str();
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t product = 1;
      for (int64_t f : dims[d])
        product *= rule.factors[f].size;
      if (product != shape[d] && !(shape[d] == 1 && dims[d].empty()))
        return (what + " " + Twine(i) + " dim " + Twine(d) + " has size " + Twine(shape[d]) +
                " but its factors multiply to " + Twine(product))
            .str();
    }
    return "";
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (std::string e = check(v, rule.operands[i], "operand", i); !e.empty())
      return e;
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (std::string e = check(v, rule.results[i], "result", i); !e.empty())
      return e;
  return "";
}

ShardingRule elementwiseShardingRule(Operation *op, ArrayRef<int64_t> wholeDims) {
  ShardingRuleBuilder b(op);
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  SmallVector<int64_t> factors;
  for (int64_t d = 0; d < (int64_t)out.size(); ++d)
    factors.push_back(out[d] == 1 ? -1
                                  : b.factor(out[d], llvm::is_contained(wholeDims, d) ? FactorKind::NeedReplication
                                                                                      : FactorKind::PassThrough));
  for (unsigned r = 0; r < op->getNumResults(); ++r)
    if (shapeOf(op->getResult(r)) == out)
      for (int64_t d = 0; d < (int64_t)out.size(); ++d)
        if (factors[d] >= 0)
          b.result(r, d, factors[d]);
  for (unsigned i = 0; i < op->getNumOperands(); ++i) {
    ArrayRef<int64_t> in = shapeOf(op->getOperand(i));
    int64_t offset = out.size() - in.size();
    for (int64_t d = 0; d < (int64_t)in.size(); ++d)
      if (offset >= 0 && in[d] == out[d + offset] && factors[d + offset] >= 0)
        b.operand(i, d, factors[d + offset]);
  }
  return b.finish();
}

//===----------------------------------------------------------------------===//
// Each op's interface methods.
//===----------------------------------------------------------------------===//

// Elementwise ops that are linear in their operands (add/sub when every operand is partial
// alike, mul/div when the other operand is whole) or only copy them.
bool NegOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }
bool StopGradientOp::propagatesPartial(unsigned, ReductionKind kind) { return movesData(kind); }
bool AddOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }
bool SubOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }
bool MulOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }
bool DivOp::propagatesPartial(unsigned index, ReductionKind kind) { return index == 0 && isSum(kind); }
bool CastOp::propagatesPartial(unsigned, ReductionKind) { return llvm::isa<FloatType>(getType().getElementType()); }
bool BroadcastOp::propagatesPartial(unsigned, ReductionKind kind) { return movesData(kind); }

ShardingRule SoftmaxOp::getShardingRule() { return elementwiseShardingRule(*this, {(int64_t)getAxis()}); }
bool SoftmaxOp::propagatesPartial(unsigned, ReductionKind) { return false; }
ShardingRule SoftmaxGradOp::getShardingRule() { return elementwiseShardingRule(*this, {(int64_t)getAxis()}); }
bool SoftmaxGradOp::propagatesPartial(unsigned, ReductionKind) { return false; }
ShardingRule TopKOp::getShardingRule() { return elementwiseShardingRule(*this, {(int64_t)getAxis()}); }
bool TopKOp::propagatesPartial(unsigned, ReductionKind) { return false; }
ShardingRule ArgSortOp::getShardingRule() { return elementwiseShardingRule(*this, {(int64_t)getAxis()}); }
bool ArgSortOp::propagatesPartial(unsigned, ReductionKind) { return false; }

ShardingRule MatMulOp::getShardingRule() { return matmulRule(*this); }
bool MatMulOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }

ShardingRule AttentionOp::getShardingRule() { return attentionRule(*this); }
bool AttentionOp::propagatesPartial(unsigned, ReductionKind) { return false; }
ShardingRule AttentionGradOp::getShardingRule() { return attentionRule(*this); }
bool AttentionGradOp::propagatesPartial(unsigned, ReductionKind) { return false; }

ShardingRule ReduceSumOp::getShardingRule() { return reduceRule(*this, ReductionKind::Sum); }
bool ReduceSumOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }
ShardingRule ReduceSumSquaresOp::getShardingRule() { return reduceRule(*this, ReductionKind::Sum); }
bool ReduceSumSquaresOp::propagatesPartial(unsigned, ReductionKind) { return false; } // squares of partials are not
ShardingRule ReduceMeanOp::getShardingRule() { return reduceRule(*this, ReductionKind::Sum); }
bool ReduceMeanOp::propagatesPartial(unsigned, ReductionKind) { return false; }
ShardingRule ReduceMaxOp::getShardingRule() { return reduceRule(*this, ReductionKind::Max); }
bool ReduceMaxOp::propagatesPartial(unsigned, ReductionKind kind) { return kind == ReductionKind::Max; }
ShardingRule ReduceMinOp::getShardingRule() { return reduceRule(*this, std::nullopt); }
bool ReduceMinOp::propagatesPartial(unsigned, ReductionKind) { return false; }
ShardingRule ReduceProdOp::getShardingRule() { return reduceRule(*this, std::nullopt); }
bool ReduceProdOp::propagatesPartial(unsigned, ReductionKind) { return false; }

ShardingRule ReshapeOp::getShardingRule() { return reshapeRule(*this); }
bool ReshapeOp::propagatesPartial(unsigned, ReductionKind kind) { return movesData(kind); }

ShardingRule TransposeOp::getShardingRule() {
  ShardingRuleBuilder b(*this);
  ArrayRef<int64_t> perm = getPermutation(), out = shapeOf(getResult());
  for (int64_t d = 0; d < (int64_t)perm.size(); ++d)
    if (out[d] != 1) {
      int64_t f = b.factor(out[d]);
      b.result(0, d, f);
      b.operand(0, perm[d], f);
    }
  return b.finish();
}
bool TransposeOp::propagatesPartial(unsigned, ReductionKind kind) { return movesData(kind); }

ShardingRule SliceOp::getShardingRule() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  return passThroughDims(*this, [&](int64_t d) {
    return getStarts()[d] == 0 && getLimits()[d] == in[d] && getStrides()[d] == 1;
  });
}
bool SliceOp::propagatesPartial(unsigned, ReductionKind kind) { return movesData(kind); }

ShardingRule PadOp::getShardingRule() {
  return passThroughDims(*this,
                         [&](int64_t d) { return getLowPadding()[d] == 0 && getHighPadding()[d] == 0 && getInteriorPadding()[d] == 0; });
}
bool PadOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind) && getValue().isZero(); }

ShardingRule ConcatOp::getShardingRule() {
  ShardingRuleBuilder b(*this);
  ArrayRef<int64_t> out = shapeOf(getResult());
  for (int64_t d = 0; d < (int64_t)out.size(); ++d) {
    if (d == (int64_t)getAxis() || out[d] == 1)
      continue;
    int64_t f = b.factor(out[d]);
    b.result(0, d, f);
    for (unsigned i = 0; i < getNumOperands(); ++i)
      b.operand(i, d, f);
  }
  b.wholeDims(FactorKind::Permutation);
  return b.finish();
}
bool ConcatOp::propagatesPartial(unsigned, ReductionKind kind) { return movesData(kind); }

ShardingRule LayerNormOp::getShardingRule() { return leadingDims(*this, getAxis(), {0}, {0}); }
bool LayerNormOp::propagatesPartial(unsigned, ReductionKind) { return false; }
// Its scale and bias gradients sum over the rows: a split row factor leaves them partial.
ShardingRule LayerNormGradOp::getShardingRule() { return leadingDims(*this, getAxis(), {0, 2}, {0}); }
bool LayerNormGradOp::propagatesPartial(unsigned, ReductionKind) { return false; }

ShardingRule GatherElementsOp::getShardingRule() { return gatherElementsRule(*this, getAxis(), true); }
bool GatherElementsOp::propagatesPartial(unsigned index, ReductionKind kind) { return index == 0 && movesData(kind); }
ShardingRule GatherElementsGradOp::getShardingRule() { return gatherElementsRule(*this, getAxis(), false); }
bool GatherElementsGradOp::propagatesPartial(unsigned index, ReductionKind kind) { return index == 0 && isSum(kind); }

ShardingRule GatherOp::getShardingRule() { return gatherRule(*this, getAxis(), getIndices(), true); }
bool GatherOp::propagatesPartial(unsigned index, ReductionKind kind) { return index == 0 && movesData(kind); }
ShardingRule GatherGradOp::getShardingRule() { return gatherRule(*this, getAxis(), getIndices(), false); }
bool GatherGradOp::propagatesPartial(unsigned index, ReductionKind kind) { return index == 0 && isSum(kind); }

namespace {
/// The mesh axes of dim `dim` of `layout` (null: whole) as an attribute, or null when whole.
ArrayAttr blockAxesOf(ShardingAttr layout, int64_t dim) {
  if (!layout || dim >= (int64_t)layout.getDimAxes().size())
    return {};
  auto axes = llvm::cast<ArrayAttr>(layout.getDimAxes()[dim]);
  return axes.empty() ? ArrayAttr() : axes;
}

/// Into how many blocks `layout` (null: whole) splits dim `dim`: the product of its mesh axes'
/// sizes (the mesh looked up from `op`; a verified module has it).
int64_t blocksOfDim(Operation *op, ShardingAttr layout, int64_t dim) {
  if (!layout || dim >= (int64_t)layout.getDimAxes().size())
    return 1;
  auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(op, layout.getMesh());
  int64_t parts = 1;
  for (StringRef axis : layout.getAxesOfDim(dim))
    parts *= mesh ? std::max<int64_t>(mesh.getAxisSize(axis), 1) : 1;
  return parts;
}
} // namespace

// The gathers take their data's (the gradients: their result's) block of the indexed dim.
void GatherOp::adaptToBlocks(ArrayRef<ShardingAttr> operands, ArrayRef<ShardingAttr>) {
  setBlockAxesAttr(blockAxesOf(operands[0], getAxis()));
}
void GatherElementsOp::adaptToBlocks(ArrayRef<ShardingAttr> operands, ArrayRef<ShardingAttr>) {
  setBlockAxesAttr(blockAxesOf(operands[0], getAxis()));
}
void GatherGradOp::adaptToBlocks(ArrayRef<ShardingAttr>, ArrayRef<ShardingAttr> results) {
  setBlockAxesAttr(blockAxesOf(results[0], getAxis()));
  setDimSize(getType().getDimSize(getAxis()));
}
void GatherElementsGradOp::adaptToBlocks(ArrayRef<ShardingAttr>, ArrayRef<ShardingAttr> results) {
  setBlockAxesAttr(blockAxesOf(results[0], getAxis()));
}

// A slice along a split dim (its rule keeps such dims whole-range) ends at the block's limit.
void SliceOp::adaptToBlocks(ArrayRef<ShardingAttr>, ArrayRef<ShardingAttr> results) {
  SmallVector<int64_t> limits(getLimits());
  for (size_t d = 0; d < limits.size(); ++d)
    limits[d] /= blocksOfDim(*this, results[0], d);
  setLimits(limits);
}

// The mean of this rank's block of the reduced dims is a partial mean: 1/n of the whole one.
double ReduceMeanOp::partialResultScale(ArrayRef<ShardingAttr> operands, ArrayRef<ShardingAttr>) {
  int64_t split = 1;
  for (int64_t a : getAxes())
    split *= blocksOfDim(*this, operands[0], a);
  return 1.0 / split;
}

bool AddOp::partialOperandsMustAgree() { return true; }
bool SubOp::partialOperandsMustAgree() { return true; }

ShardingRule Conv2DOp::getShardingRule() {
  ShardingRuleBuilder b(*this);
  ArrayRef<int64_t> in = shapeOf(getInput()), w = shapeOf(getWeight());
  if (in[0] != 1) {
    int64_t n = b.factor(in[0]);
    b.operand(0, 0, n);
    b.result(0, 0, n);
  }
  if (w[0] != 1) {
    int64_t out = b.factor(w[0]);
    b.operand(1, 0, out);
    b.result(0, 1, out);
    if (getBias())
      b.operand(2, 0, out);
  }
  if (getGroups() == 1 && in[1] != 1) {
    int64_t c = b.factor(in[1]);
    b.operand(0, 1, c);
    b.operand(1, 1, c);
  }
  return b.finish();
}
bool Conv2DOp::propagatesPartial(unsigned, ReductionKind) { return false; }

// The weight gradient sums over the batch: a reduction.
ShardingRule Conv2DGradWeightOp::getShardingRule() {
  ShardingRuleBuilder b(*this);
  int64_t batch = shapeOf(getInput())[0];
  if (batch != 1) {
    int64_t n = b.factor(batch);
    b.operand(0, 0, n);
    b.operand(1, 0, n);
  }
  return b.finish();
}
bool Conv2DGradWeightOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }
ShardingRule Conv2DGradInputOp::getShardingRule() { return leadingDims(*this, 1, {0}, {0}); }
bool Conv2DGradInputOp::propagatesPartial(unsigned, ReductionKind kind) { return isSum(kind); }

} // namespace cpc
