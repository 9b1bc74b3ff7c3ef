//===- GroupAdamW.cpp - the step's AdamW updates as one multi-tensor op ----===//
//
// After partitioning, the update of a step is one cpc.adamw per parameter, each a kernel launch
// on a GPU. Updates that share lr, step, grad scale, betas, epsilon and element type, and whose
// results only feed assigns (so the plan updates the variables in place and the group needs no
// more memory than its members), become one cpc.multi_tensor_adamw at the first member. What a
// later member reads is hoisted there when that is safe: side-effect-free ops, and variable
// reads with no assign to the same variable in between. Members that cannot be reached that way
// stay single.
//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <map>
#include <tuple>

namespace cpc {
#define GEN_PASS_DEF_CPCGROUPADAMW
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// The variable an op reads, or "" (parameter and state reads).
StringRef variableRead(Operation *op) {
  if (auto p = llvm::dyn_cast<ParameterOp>(op))
    return p.getName();
  if (auto s = llvm::dyn_cast<StateOp>(op))
    return s.getName();
  return {};
}

/// Collects into `hoist` the ops that must move before `first` for `v` to be available there;
/// false when one of them may not move.
bool collectHoists(Value v, Operation *first, llvm::SetVector<Operation *> &hoist) {
  Operation *def = v.getDefiningOp();
  if (!def || hoist.contains(def))
    return true;
  if (def->getBlock() != first->getBlock())
    return false; // (the training functions are one block)
  if (def == first || def->isBeforeInBlock(first))
    return true;
  StringRef variable = variableRead(def);
  if (!variable.empty()) { // a read moves earlier only past no write of its variable
    for (Operation *op = first; op != def; op = op->getNextNode())
      if (auto assign = llvm::dyn_cast<AssignOp>(op); assign && assign.getName() == variable)
        return false;
  } else if (!isMemoryEffectFree(def) || def->getNumRegions() != 0) {
    return false;
  }
  for (Value operand : def->getOperands())
    if (!collectHoists(operand, first, hoist))
      return false;
  hoist.insert(def);
  return true;
}

bool onlyAssigned(AdamWOp op) {
  return llvm::all_of(op->getUsers(), [](Operation *user) { return llvm::isa<AssignOp>(user); });
}

void groupUpdates(ArrayRef<AdamWOp> members) {
  AdamWOp first = members.front();
  llvm::SetVector<Operation *> hoist;
  SmallVector<AdamWOp> grouped{first};
  for (AdamWOp member : members.drop_front()) {
    llvm::SetVector<Operation *> extra = hoist;
    if (llvm::all_of(member->getOperands(), [&](Value v) { return collectHoists(v, first, extra); })) {
      hoist = std::move(extra);
      grouped.push_back(member);
    }
  }
  if (grouped.size() < 2)
    return;
  SmallVector<Operation *> moving(hoist.begin(), hoist.end());
  llvm::sort(moving, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (Operation *op : moving)
    op->moveBefore(first);

  OpBuilder b(first);
  Value scale = first.getGradScale();
  if (!scale) { // no clipping: a scale of 1 changes no bit
    auto type = RankedTensorType::get({}, first.getParam().getType().getElementType());
    scale = b.create<ConstantOp>(first.getLoc(), DenseElementsAttr::get(type, b.getFloatAttr(type.getElementType(), 1.0)));
  }
  SmallVector<Value> tensors;
  SmallVector<Type> results;
  SmallVector<double> decays;
  for (auto get : {&AdamWOp::getParam, &AdamWOp::getGrad, &AdamWOp::getExpAvg, &AdamWOp::getExpAvgSq})
    for (AdamWOp m : grouped)
      tensors.push_back((m.*get)());
  for (int r = 0; r < 3; ++r)
    for (AdamWOp m : grouped)
      results.push_back(m->getResult(r).getType());
  for (AdamWOp m : grouped)
    decays.push_back(m.getWeightDecay().convertToDouble());
  auto multi = b.create<MultiTensorAdamWOp>(first.getLoc(), results, first.getLr(), first.getStep(), scale, tensors,
                                            first.getBeta1Attr(), first.getBeta2Attr(), first.getEpsilonAttr(),
                                            b.getDenseF64ArrayAttr(decays));
  unsigned n = grouped.size();
  for (unsigned i = 0; i < n; ++i) {
    grouped[i].getNewParam().replaceAllUsesWith(multi.getNewParam(i));
    grouped[i].getNewExpAvg().replaceAllUsesWith(multi.getNewExpAvg(i));
    grouped[i].getNewExpAvgSq().replaceAllUsesWith(multi.getNewExpAvgSq(i));
    grouped[i]->erase();
  }
}

struct CpcGroupAdamWPass : cpc::impl::CpcGroupAdamWBase<CpcGroupAdamWPass> {
  void runOnOperation() override {
    // Members by block and by what they share, in program order.
    using Key = std::tuple<Block *, const void *, const void *, const void *, double, double, double, const void *>;
    std::map<Key, SmallVector<AdamWOp>> groups;
    SmallVector<Key> order;
    getOperation()->walk([&](AdamWOp op) {
      if (!onlyAssigned(op))
        return;
      Key key{op->getBlock(),
              op.getLr().getAsOpaquePointer(),
              op.getStep().getAsOpaquePointer(),
              op.getGradScale() ? op.getGradScale().getAsOpaquePointer() : nullptr,
              op.getBeta1().convertToDouble(),
              op.getBeta2().convertToDouble(),
              op.getEpsilon().convertToDouble(),
              op.getParam().getType().getElementType().getAsOpaquePointer()};
      auto [it, added] = groups.try_emplace(key);
      if (added)
        order.push_back(key);
      it->second.push_back(op);
    });
    for (const Key &key : order)
      groupUpdates(groups[key]);
  }
};

} // namespace
