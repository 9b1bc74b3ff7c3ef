//===- BuildTrainStep.cpp - accumulation, clipping and AdamW as IR --------===//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

#include <regex>

namespace cpc {
#define GEN_PASS_DEF_CPCBUILDTRAINSTEP
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

struct TrainedParam {
  std::string name;
  RankedTensorType type;
  bool decay;
  ParameterOp forward; // how the forward reads it (its attributes, e.g. a stored element order)
};

class StepBuilder {
public:
  StepBuilder(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  Value scalar(double v, Type elementType = {}) {
    Type et = elementType ? elementType : b.getF32Type();
    auto type = RankedTensorType::get({}, et);
    return b.create<ConstantOp>(loc, DenseElementsAttr::get(type, b.getFloatAttr(et, v)));
  }
  Value splat(double v, RankedTensorType type) {
    return b.create<BroadcastOp>(loc, type, scalar(v, type.getElementType()));
  }
  Value sumAll(Value v) {
    auto t = llvm::cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < t.getRank(); ++d)
      axes.push_back(d);
    if (axes.empty())
      return v;
    return b.create<ReduceSumOp>(loc, v, b.getDenseI64ArrayAttr(axes), b.getBoolAttr(false));
  }
  /// Element type conversion of a rank-0 value (the norm is f32 whatever the parameters are).
  Value toType(Value v, Type elementType) {
    auto t = llvm::cast<RankedTensorType>(v.getType());
    if (t.getElementType() == elementType)
      return v;
    return b.create<CastOp>(loc, RankedTensorType::get(t.getShape(), elementType), v);
  }

  /// Clipping and AdamW over `grads` (one per param), then assigns of parameters and moments.
  /// Returns the global gradient norm before clipping (f32), as clip_grad_norm_ does.
  Value optimize(ArrayRef<TrainedParam> params, ArrayRef<Value> grads, Value lr, Value step, double clip,
                 double beta1, double beta2, double epsilon, double weightDecay) {
    Value total;
    for (Value g : grads) {
      Value sq = toType(sumAll(b.create<MulOp>(loc, g, g)), b.getF32Type());
      total = total ? b.create<AddOp>(loc, total, sq).getResult() : sq;
    }
    Value norm = total ? b.create<SqrtOp>(loc, total.getType(), total).getResult() : scalar(0.0);
    Value coef;
    if (clip > 0) {
      // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1.
      Value c = b.create<DivOp>(loc, scalar(clip), b.create<AddOp>(loc, norm, scalar(1e-6)));
      coef = b.create<MinOp>(loc, c, scalar(1.0));
    }
    for (auto [p, grad] : llvm::zip(params, grads)) {
      Type et = p.type.getElementType();
      Value g = grad;
      if (coef)
        g = b.create<MulOp>(loc, g, toType(coef, et));
      auto paramOp = b.create<ParameterOp>(loc, p.type, b.getStringAttr(p.name), b.getUnitAttr());
      if (ParameterOp forward = p.forward) { // the update reads the variable as the forward does
        paramOp.setStoredViewAttr(forward.getStoredViewAttr());
        paramOp.setStoredPermAttr(forward.getStoredPermAttr());
      }
      Value param = paramOp;
      Value m = b.create<StateOp>(loc, p.type, StateRole::ExpAvg, "adamw.exp_avg." + p.name);
      Value v = b.create<StateOp>(loc, p.type, StateRole::ExpAvgSq, "adamw.exp_avg_sq." + p.name);
      auto adam = b.create<AdamWOp>(loc, param, g, m, v, toType(lr, et), toType(step, et), b.getF64FloatAttr(beta1),
                                    b.getF64FloatAttr(beta2), b.getF64FloatAttr(epsilon),
                                    b.getF64FloatAttr(p.decay ? weightDecay : 0.0));
      b.create<AssignOp>(loc, adam.getNewParam(), b.getStringAttr(p.name));
      b.create<AssignOp>(loc, adam.getNewExpAvg(), b.getStringAttr("adamw.exp_avg." + p.name));
      b.create<AssignOp>(loc, adam.getNewExpAvgSq(), b.getStringAttr("adamw.exp_avg_sq." + p.name));
    }
    return norm;
  }

  OpBuilder &b;
  Location loc;
};

struct CpcBuildTrainStepPass : cpc::impl::CpcBuildTrainStepBase<CpcBuildTrainStepPass> {
  using CpcBuildTrainStepBase::CpcBuildTrainStepBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grad = module.lookupSymbol<func::FuncOp>("main_grad");
    if (!grad) {
      module.emitError("no @main_grad: run cpc-autodiff first");
      return signalPassFailure();
    }
    if (accumulation < 1) {
      module.emitError("accumulation must be >= 1");
      return signalPassFailure();
    }
    std::vector<std::regex> noDecay;
    for (const std::string &pattern : noWeightDecay)
      noDecay.emplace_back(pattern);

    // The trained parameters, in the order of @main_grad's gradient results.
    SmallVector<TrainedParam> params;
    for (unsigned i = 1; i < grad.getNumResults(); ++i) {
      auto name = grad.getResultAttrOfType<StringAttr>(i, "cpc.grad_of");
      if (!name) {
        grad.emitError("result ") << i << " is not a gradient (no cpc.grad_of)";
        return signalPassFailure();
      }
      auto type = llvm::cast<RankedTensorType>(grad.getResultTypes()[i]);
      std::string n = name.getValue().str();
      bool decay = !(defaultNoDecay && (type.getRank() <= 1 || llvm::StringRef(n).ends_with(".bias")));
      for (const auto &re : noDecay)
        decay &= !std::regex_search(n, re);
      ParameterOp forward;
      grad.walk([&](ParameterOp op) {
        if (op.getName() == n)
          forward = op;
      });
      params.push_back({n, type, decay, forward});
    }

    OpBuilder b(module.getContext());
    b.setInsertionPointToEnd(module.getBody());
    Location loc = grad.getLoc();
    auto scalarType = RankedTensorType::get({}, b.getF32Type());
    auto runtimeArg = [&](func::FuncOp f, unsigned index, RuntimeInput input) {
      f.setArgAttr(index, "cpc.name", b.getStringAttr(input == RuntimeInput::LearningRate ? "lr" : "step"));
      setRuntimeInput(f, index, input);
    };
    auto named = [&](StringRef n) { return b.getDictionaryAttr({b.getNamedAttr("cpc.name", b.getStringAttr(n))}); };

    // The forward + backward body with its inputs: cloned into @train_step or @accumulate.
    func::FuncOp body = llvm::cast<func::FuncOp>(b.clone(*grad));
    auto ret = llvm::cast<func::ReturnOp>(body.getBody().front().getTerminator());
    Value loss = ret.getOperand(0);
    SmallVector<Value> grads(ret.getOperands().drop_front());
    unsigned numInputs = body.getNumArguments();

    if (accumulation == 1 && !separateApply) {
      body.setSymName("train_step");
      setPhase(body, Phase::TrainStep);
      Block &block = body.getBody().front();
      // insertArgument keeps the function type and argument attributes in step with the block.
      (void)body.insertArgument(numInputs, scalarType, {}, loc);
      (void)body.insertArgument(numInputs + 1, scalarType, {}, loc);
      Value lr = block.getArgument(numInputs), step = block.getArgument(numInputs + 1);
      b.setInsertionPoint(ret);
      StepBuilder sb(b, loc);
      Value norm = sb.optimize(params, grads, lr, step, clipGradNorm, beta1, beta2, epsilon, weightDecay);
      b.create<func::ReturnOp>(loc, ValueRange{loss, norm});
      ret.erase();
      body.setFunctionType(b.getFunctionType(block.getArgumentTypes(), {loss.getType(), norm.getType()}));
      runtimeArg(body, numInputs, RuntimeInput::LearningRate);
      runtimeArg(body, numInputs + 1, RuntimeInput::Step);
      body.setAllResultAttrs(ArrayRef<DictionaryAttr>{named("loss"), named("grad_norm")});
      return;
    }

    // @accumulate: add this microbatch's gradients into the accumulators.
    body.setSymName("accumulate");
    setPhase(body, Phase::Accumulate);
    b.setInsertionPoint(ret);
    for (auto [p, g] : llvm::zip(params, grads)) {
      std::string acc = "grad_acc." + p.name;
      Value old = b.create<StateOp>(loc, p.type, StateRole::GradAccumulator, acc);
      b.create<AssignOp>(loc, b.create<AddOp>(loc, old, g), b.getStringAttr(acc));
    }
    b.create<func::ReturnOp>(loc, ValueRange{loss});
    ret.erase();
    body.setFunctionType(b.getFunctionType(body.getArgumentTypes(), {loss.getType()}));
    body.setAllResultAttrs(ArrayRef<DictionaryAttr>{named("loss")});

    // @apply: average, clip, AdamW, zero the accumulators.
    b.setInsertionPointToEnd(module.getBody());
    auto apply = b.create<func::FuncOp>(loc, "apply", b.getFunctionType({scalarType, scalarType}, {scalarType}));
    setPhase(apply, Phase::Apply);
    Block *entry = apply.addEntryBlock();
    b.setInsertionPointToStart(entry);
    StepBuilder sb(b, loc);
    SmallVector<Value> averaged;
    for (const TrainedParam &p : params) {
      Value acc = b.create<StateOp>(loc, p.type, StateRole::GradAccumulator, "grad_acc." + p.name);
      averaged.push_back(b.create<MulOp>(loc, acc, sb.scalar(1.0 / accumulation, p.type.getElementType())));
    }
    Value norm = sb.optimize(params, averaged, entry->getArgument(0), entry->getArgument(1), clipGradNorm, beta1,
                             beta2, epsilon, weightDecay);
    for (const TrainedParam &p : params)
      b.create<AssignOp>(loc, sb.splat(0.0, p.type), b.getStringAttr("grad_acc." + p.name));
    b.create<func::ReturnOp>(loc, ValueRange{norm});
    runtimeArg(apply, 0, RuntimeInput::LearningRate);
    runtimeArg(apply, 1, RuntimeInput::Step);
    apply.setAllResultAttrs(ArrayRef<DictionaryAttr>{named("grad_norm")});
  }
};

} // namespace
