//===- MixedPrecision.cpp - torch.autocast as a rewrite of element types ---===//
//
// Each float op of the loss function gets a compute type from its autocast class (an ODS trait,
// dialects/cpc/Autocast.h): 16-bit for matmul and conv, f32 for the numerically sensitive ops,
// otherwise the widest float operand. Operands of another float type are cast, once per value
// and type, right after the value is defined, so every use shares the cast: a parameter (the
// f32 master weight) is cast to 16-bit once per step, and autodiff's rule for that cast turns
// the 16-bit gradient into an f32 one for the update. Two exemptions follow torch, where the
// bias add is inside the Linear/Conv op and Python scalars never promote: a parameter-only
// value added to a 16-bit op's result (the exported bias add), and a constant of one element,
// do not widen an op. The function's results keep their declared types (cast back at return).
//
#include "passes/Passes.h"
#include "dialects/cpc/Roles.h"

#include "mlir/IR/Builders.h"

namespace cpc {
#define GEN_PASS_DEF_CPCMIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// f32 and the 16-bit types: what autocast moves between (f64 and integers stay as they are).
bool isAutocastFloat(Type t) { return t.isF32() || t.isBF16() || t.isF16(); }

Type elementType(Value v) {
  auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getElementType() : Type();
}

bool isAutocastValue(Value v) {
  Type e = elementType(v);
  return e && isAutocastFloat(e);
}

class Autocaster {
public:
  Autocaster(func::FuncOp func, Type low) : func_(func), low_(low) {}

  void run() {
    SmallVector<Operation *> ops;
    func_.walk([&](Operation *op) {
      if (op->getParentOp() == func_.getOperation())
        ops.push_back(op);
    });
    for (Operation *op : ops) {
      if (isa<ParameterOp, ConstantOp, CastOp, func::ReturnOp>(op) || op->getNumOperands() == 0)
        continue;
      rewrite(op);
    }
    castResultsBack();
  }

private:
  /// Depends on parameters and constants alone (a weight, or something computed from weights).
  bool isWeightOnly(Value v) {
    auto it = weightOnly_.find(v);
    if (it != weightOnly_.end())
      return it->second;
    Operation *def = v.getDefiningOp();
    bool result = def && (isa<ParameterOp, ConstantOp>(def) ||
                          (def->getNumOperands() > 0 && !isa<RandomUniformOp>(def) &&
                           llvm::all_of(def->getOperands(), [&](Value o) { return isWeightOnly(o); })));
    weightOnly_[v] = result;
    return result;
  }

  static bool isScalarConstant(Value v) {
    auto c = v.getDefiningOp<ConstantOp>();
    return c && llvm::cast<RankedTensorType>(c.getType()).getNumElements() <= 1;
  }

  /// Whether operand `i` of `op` takes part in choosing the widest type.
  bool promotes(Operation *op, unsigned i) {
    Value v = op->getOperand(i);
    if (isScalarConstant(v))
      return false;
    if (op->getNumOperands() == 2 && isa<AddOp>(op) && isWeightOnly(v)) {
      Operation *other = op->getOperand(1 - i).getDefiningOp();
      if (other && other->hasTrait<cpc::OpTrait::AutocastLowPrecision>())
        return false; // the bias of a Linear / Conv
    }
    return true;
  }

  /// The element type `op` computes in, or null to leave it alone.
  Type computeType(Operation *op) {
    bool anyFloat = false, anyF32 = false, countedF32 = false, counted = false;
    for (unsigned i = 0; i < op->getNumOperands(); ++i) {
      Value v = op->getOperand(i);
      if (!isAutocastValue(v))
        continue;
      anyFloat = true;
      bool wide = elementType(v).isF32();
      anyF32 |= wide;
      if (promotes(op, i)) {
        counted = true;
        countedF32 |= wide;
      }
    }
    if (!anyFloat)
      return {};
    if (op->hasTrait<cpc::OpTrait::AutocastLowPrecision>())
      return low_;
    Builder b(op->getContext());
    if (op->hasTrait<cpc::OpTrait::AutocastFullPrecision>())
      return b.getF32Type();
    bool wide = counted ? countedF32 : anyF32;
    return wide ? Type(b.getF32Type()) : low_;
  }

  void rewrite(Operation *op) {
    Type compute = computeType(op);
    if (!compute)
      return;
    for (OpOperand &operand : op->getOpOperands())
      if (isAutocastValue(operand.get()) && elementType(operand.get()) != compute)
        operand.set(castTo(operand.get(), compute));
    for (Value result : op->getResults())
      if (isAutocastValue(result))
        result.setType(llvm::cast<RankedTensorType>(result.getType()).clone(compute));
  }

  /// `v` as element type `to`: one cast per value and type, right after v's definition.
  Value castTo(Value v, Type to) {
    auto key = std::make_pair(v, to);
    if (Value done = casts_.lookup(key))
      return done;
    OpBuilder b(func_.getContext());
    Operation *def = v.getDefiningOp();
    if (def)
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(&func_.getBody().front());
    auto cast = b.create<CastOp>(v.getLoc(), llvm::cast<RankedTensorType>(v.getType()).clone(to), v);
    if (def)
      if (auto stage = def->getAttr(kStageAttrName)) // a pipeline chunk's activation stays in it
        cast->setAttr(kStageAttrName, stage);
    casts_[key] = cast.getResult();
    return cast.getResult();
  }

  void castResultsBack() {
    ArrayRef<Type> declared = func_.getFunctionType().getResults();
    func_.walk([&](func::ReturnOp ret) {
      OpBuilder b(ret);
      for (OpOperand &operand : ret->getOpOperands()) {
        Type want = declared[operand.getOperandNumber()];
        if (operand.get().getType() != want)
          operand.set(b.create<CastOp>(ret.getLoc(), want, operand.get()));
      }
    });
  }

  func::FuncOp func_;
  Type low_;
  DenseMap<std::pair<Value, Type>, Value> casts_;
  DenseMap<Value, bool> weightOnly_;
};

struct CpcMixedPrecisionPass : cpc::impl::CpcMixedPrecisionBase<CpcMixedPrecisionPass> {
  using CpcMixedPrecisionBase::CpcMixedPrecisionBase;

  void runOnOperation() override {
    if (precision == Precision::FP32)
      return;
    Builder b(&getContext());
    Type low = precision == Precision::BF16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
    auto func = getOperation().lookupSymbol<func::FuncOp>(funcName);
    if (!func || func.isExternal()) {
      getOperation().emitError() << "no function @" << funcName << " to cast";
      return signalPassFailure();
    }
    Autocaster(func, low).run();
  }
};

} // namespace
