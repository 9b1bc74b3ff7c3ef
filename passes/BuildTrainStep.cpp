//===- BuildTrainStep.cpp - accumulation, clipping and AdamW as IR --------===//
#include "dialects/cpc/Roles.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"

#include <limits>
#include <regex>

namespace cpc {
#define GEN_PASS_DEF_CPCBUILDTRAINSTEP
#include "passes/Passes.h.inc"
} // namespace cpc

using namespace mlir;
using namespace cpc;

namespace {

/// What the update needs of the pass's options.
struct UpdateOptions {
  double clipGradNorm, beta1, beta2, epsilon, weightDecay;
  double lossScale, growthFactor, backoffFactor; // lossScale 0: no loss scaling
  int64_t growthInterval, hysteresis;
};

struct TrainedParam {
  std::string name;
  RankedTensorType type;
  bool decay;
};

/// A state kept element for element beside parameter `p` (its moments, its accumulator): it is
/// stored in the parameter's element order, and its variable says so as the parameter's does
/// (stored_view/stored_perm), so that its values can be read in the model's order (a checkpoint
/// written on one layout and read on another).
Value readParameterState(OpBuilder &b, Location loc, StateRole role, const std::string &name, const TrainedParam &p) {
  StateOp state = readState(b, loc, role, name, p.type);
  VariableOp param = findVariable(state->getParentOfType<ModuleOp>(), p.name);
  VariableOp variable = findVariable(state->getParentOfType<ModuleOp>(), name);
  if (param && param.getStoredViewAttr() && !variable.getStoredViewAttr()) {
    variable.setStoredViewAttr(param.getStoredViewAttr());
    variable.setStoredPermAttr(param.getStoredPermAttr());
  }
  return state;
}

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

  /// `grads` times the rank-0 f32 `factor` (1/accumulation, the loss scale's inverse), or as
  /// they are for no factor.
  SmallVector<Value> scaled(ArrayRef<Value> grads, Value factor) {
    SmallVector<Value> out;
    for (Value g : grads)
      out.push_back(factor ? b.create<MulOp>(loc, g, toType(factor, llvm::cast<RankedTensorType>(g.getType()).getElementType())).getResult() : g);
    return out;
  }

  /// Clipping and AdamW over `grads` (one per param), then assigns of parameters and moments.
  /// Returns the global gradient norm before clipping (f32), as clip_grad_norm_ does. With a
  /// `skip` flag (i1, rank 0), every assign keeps the variable's old value where it is true.
  Value optimize(ArrayRef<TrainedParam> params, ArrayRef<Value> grads, Value lr, Value step, double clip,
                 double beta1, double beta2, double epsilon, double weightDecay, Value *finite = nullptr) {
    Value total;
    // Last parameter first: backward makes the last layers' gradients first, so with data
    // parallelism their buckets are reduced first and the norm's first terms need not wait for
    // the last bucket (which still goes on while they are summed).
    for (Value g : llvm::reverse(grads)) {
      Value sq = toType(sumAll(b.create<MulOp>(loc, g, g)), b.getF32Type());
      total = total ? b.create<AddOp>(loc, total, sq).getResult() : sq;
    }
    if (finite) // an inf or NaN anywhere makes the sum of squares inf or NaN, which fails x < inf
      *finite = b.create<LessOp>(loc, total ? total : scalar(0.0), scalar(std::numeric_limits<double>::infinity()));
    auto keepUnlessFinite = [&](Value updated, Value old) {
      return finite ? b.create<WhereOp>(loc, *finite, updated, old).getResult() : updated;
    };
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
      Value param = b.create<ParameterOp>(loc, p.type, FlatSymbolRefAttr::get(b.getContext(), p.name));
      Value m = readParameterState(b, loc, StateRole::ExpAvg, "adamw.exp_avg." + p.name, p);
      Value v = readParameterState(b, loc, StateRole::ExpAvgSq, "adamw.exp_avg_sq." + p.name, p);
      auto adam = b.create<AdamWOp>(loc, param, g, m, v, toType(lr, et), toType(step, et), /*grad_scale=*/Value(),
                                    b.getF64FloatAttr(beta1),
                                    b.getF64FloatAttr(beta2), b.getF64FloatAttr(epsilon),
                                    b.getF64FloatAttr(p.decay ? weightDecay : 0.0));
      assignVariable(b, loc, keepUnlessFinite(adam.getNewParam(), param), p.name);
      assignVariable(b, loc, keepUnlessFinite(adam.getNewExpAvg(), m), "adamw.exp_avg." + p.name);
      assignVariable(b, loc, keepUnlessFinite(adam.getNewExpAvgSq(), v), "adamw.exp_avg_sq." + p.name);
    }
    return norm;
  }

  /// The dynamic loss scaler's update after a step whose gradients were `finite` (i1): as
  /// torch's GradScaler, the scale is multiplied by the growth factor after `interval` clean
  /// steps in a row; on an overflow the clean count restarts, and once `hysteresis` overflows
  /// have happened since the last growth (1: at once, as torch; Colossal's default is 2) each
  /// further one multiplies it by the backoff factor. Returns the scale this step used.
  void updateLossScale(Value scale, Value finite, const UpdateOptions &o) {
    auto scalarType = RankedTensorType::get({}, b.getF32Type());
    Value growth = readState(b, loc, StateRole::GrowthTracker, kGrowthTrackerStateName, scalarType);
    Value overflows = readState(b, loc, StateRole::OverflowTracker, kOverflowTrackerStateName, scalarType);
    Value one = scalar(1.0), zero = scalar(0.0);
    Value clean = b.create<WhereOp>(loc, finite, b.create<AddOp>(loc, growth, one), zero);
    Value grow = b.create<GreaterEqualOp>(loc, clean, scalar((double)o.growthInterval));
    Value over = b.create<WhereOp>(loc, finite, overflows, b.create<AddOp>(loc, overflows, one));
    Value backOff = b.create<AndOp>(loc, b.create<NotOp>(loc, finite),
                                    b.create<GreaterEqualOp>(loc, over, scalar((double)o.hysteresis)));
    Value newScale =
        b.create<WhereOp>(loc, grow, b.create<MulOp>(loc, scale, scalar(o.growthFactor)),
                          b.create<WhereOp>(loc, backOff, b.create<MulOp>(loc, scale, scalar(o.backoffFactor)), scale));
    assignVariable(b, loc, newScale, kLossScaleStateName);
    assignVariable(b, loc, b.create<WhereOp>(loc, grow, zero, clean), kGrowthTrackerStateName);
    assignVariable(b, loc, b.create<WhereOp>(loc, grow, zero, over), kOverflowTrackerStateName);
  }

  /// Unscaling, clipping, AdamW, the skip on overflow and the scaler's update over `grads`
  /// (scaled by the loss scale and summed over `accumulation` microbatches): returns the step's
  /// results after the loss: grad_norm, and with loss scaling the scale used and the overflow flag.
  SmallVector<Value> update(ArrayRef<TrainedParam> params, ArrayRef<Value> grads, Value lr, Value step,
                            int64_t accumulation, const UpdateOptions &o) {
    Value factor = accumulation > 1 ? scalar(1.0 / accumulation) : Value();
    Value scale;
    if (o.lossScale > 0) {
      scale = readLossScale(b, loc, o.lossScale);
      factor = b.create<DivOp>(loc, factor ? factor : scalar(1.0), scale);
    }
    SmallVector<Value> unscaled = scaled(grads, factor);
    Value finite;
    Value norm = optimize(params, unscaled, lr, step, o.clipGradNorm, o.beta1, o.beta2, o.epsilon, o.weightDecay,
                          scale ? &finite : nullptr);
    if (!scale)
      return {norm};
    updateLossScale(scale, finite, o);
    Value overflow = b.create<CastOp>(loc, scale.getType(), b.create<NotOp>(loc, finite));
    return {norm, scale, overflow};
  }

  OpBuilder &b;
  Location loc;
};

struct CpcBuildTrainStepPass : cpc::impl::CpcBuildTrainStepBase<CpcBuildTrainStepPass> {
  using CpcBuildTrainStepBase::CpcBuildTrainStepBase;

  void runOnOperation() override {
    if (failed(buildSteps()))
      return signalPassFailure();
    // The model's forward and its gradient live on inside the training functions: gone, the
    // variables are read by the functions of the plan alone.
    for (auto func : llvm::make_early_inc_range(getOperation().getOps<func::FuncOp>()))
      if (!getPhase(func))
        func.erase();
  }

  // Over 80 lines: the train step's parts (accumulation, clip, AdamW, assigns) built in order on one
  // builder; to be split when the pass becomes a function-level pass (issue 30, item 5).
  LogicalResult buildSteps() {
    ModuleOp module = getOperation();
    auto grad = module.lookupSymbol<func::FuncOp>("main_grad");
    if (!grad) {
      module.emitError("no @main_grad: run cpc-autodiff first");
      return failure();
    }
    if (accumulation < 1) {
      module.emitError("accumulation must be >= 1");
      return failure();
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
        return failure();
      }
      auto type = llvm::cast<RankedTensorType>(grad.getResultTypes()[i]);
      std::string n = name.getValue().str();
      bool decay = !(defaultNoDecay && (type.getRank() <= 1 || llvm::StringRef(n).ends_with(".bias")));
      for (const auto &re : noDecay)
        decay &= !std::regex_search(n, re);
      params.push_back({n, type, decay});
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
    // The step's results in order: loss, grad_norm, then the loss scaler's (the first `n`).
    auto resultNames = [&](size_t n) {
      SmallVector<DictionaryAttr> all{named("loss"), named("grad_norm"), named("loss_scale"), named("overflow")};
      return SmallVector<DictionaryAttr>(ArrayRef<DictionaryAttr>(all).take_front(n));
    };
    UpdateOptions updateOptions{clipGradNorm, beta1, beta2, epsilon, weightDecay,
                                lossScale, growthFactor, backoffFactor, growthInterval, hysteresis};
    if (lossScale < 0 || (lossScale > 0 && (growthInterval < 1 || hysteresis < 1 || !(growthFactor >= 1) ||
                                             !(backoffFactor > 0 && backoffFactor < 1)))) {
      module.emitError("bad loss scaling: loss-scale >= 0, growth-interval >= 1, hysteresis >= 1, growth-factor >= 1 "
                       "and 0 < backoff-factor < 1 are needed");
      return failure();
    }

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
      SmallVector<Value> results{loss};
      llvm::append_range(results, sb.update(params, grads, lr, step, 1, updateOptions));
      b.create<func::ReturnOp>(loc, results);
      ret.erase();
      body.setFunctionType(b.getFunctionType(block.getArgumentTypes(), ValueRange(results).getTypes()));
      runtimeArg(body, numInputs, RuntimeInput::LearningRate);
      runtimeArg(body, numInputs + 1, RuntimeInput::Step);
      body.setAllResultAttrs(resultNames(results.size()));
      return success();
    }

    // @accumulate: add this microbatch's gradients into the accumulators.
    body.setSymName("accumulate");
    setPhase(body, Phase::Accumulate);
    b.setInsertionPoint(ret);
    for (auto [p, g] : llvm::zip(params, grads)) {
      std::string acc = "grad_acc." + p.name;
      Value old = readParameterState(b, loc, StateRole::GradAccumulator, acc, p);
      assignVariable(b, loc, b.create<AddOp>(loc, old, g), acc);
    }
    b.create<func::ReturnOp>(loc, ValueRange{loss});
    ret.erase();
    body.setFunctionType(b.getFunctionType(body.getArgumentTypes(), {loss.getType()}));
    body.setAllResultAttrs(ArrayRef<DictionaryAttr>{named("loss")});

    // @apply: average (and unscale), clip, AdamW, zero the accumulators.
    b.setInsertionPointToEnd(module.getBody());
    size_t numResults = lossScale > 0 ? 3 : 1;
    auto apply = b.create<func::FuncOp>(
        loc, "apply", b.getFunctionType({scalarType, scalarType}, SmallVector<Type>(numResults, scalarType)));
    setPhase(apply, Phase::Apply);
    Block *entry = apply.addEntryBlock();
    b.setInsertionPointToStart(entry);
    StepBuilder sb(b, loc);
    SmallVector<Value> sums;
    for (const TrainedParam &p : params)
      sums.push_back(readParameterState(b, loc, StateRole::GradAccumulator, "grad_acc." + p.name, p));
    SmallVector<Value> results =
        sb.update(params, sums, entry->getArgument(0), entry->getArgument(1), accumulation, updateOptions);
    for (const TrainedParam &p : params)
      assignVariable(b, loc, sb.splat(0.0, p.type), "grad_acc." + p.name);
    b.create<func::ReturnOp>(loc, results);
    runtimeArg(apply, 0, RuntimeInput::LearningRate);
    runtimeArg(apply, 1, RuntimeInput::Step);
    SmallVector<DictionaryAttr> names = resultNames(results.size() + 1);
    apply.setAllResultAttrs(ArrayRef<DictionaryAttr>(names).drop_front());
    return success();
  }
};

} // namespace
