//===- PlanBuilder.cpp ----------------------------------------------------===//
#include "compiler/PlanBuilder.h"
#include "runtime/HostMemory.h"
#include "kernels/Float16.h"
#include "kernels/cpu/Kernel.h"
#include "compiler/MemoryPlanner.h"
#include "compiler/PeakMemory.h"
#include "runtime/Blocks.h"
#include "runtime/PipelineSchedule.h"
#include "runtime/ScheduleCheck.h"
#include "runtime/StepTime.h"
#include "dialects/cpc/Cost.h"
#include "dialects/cpc/CpcDialect.h"
#include "dialects/cpc/Roles.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

using namespace mlir;

namespace cpc {

namespace {

/// IR the plan cannot hold, at the op that has it: buildPlan reports it as a diagnostic there
/// (unwinding from deep in the lowering, where the op is at hand).
struct LoweringError : RuntimeError {
  LoweringError(Operation *where, const std::string &message) : RuntimeError(message), where(where) {}
  Operation *where;
};

DType dtypeOf(Type t, Operation *where) {
  if (t.isF32()) return DType::F32;
  if (t.isF64()) return DType::F64;
  if (t.isF16()) return DType::F16;
  if (t.isBF16()) return DType::BF16;
  if (t.isInteger(1)) return DType::I1;
  if (t.isUnsignedInteger(8)) return DType::U8;
  if (t.isInteger(8)) return DType::I8;
  if (t.isInteger(16)) return DType::I16;
  if (t.isInteger(32)) return DType::I32;
  if (t.isInteger(64)) return DType::I64;
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  throw LoweringError(where, "element type " + s + " has no plan type");
}

std::string locName(Location loc) {
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    return name.getName().str();
  if (auto fused = llvm::dyn_cast<FusedLoc>(loc))
    for (Location inner : fused.getLocations())
      if (auto name = llvm::dyn_cast<NameLoc>(inner))
        return name.getName().str();
  return "";
}

nlohmann::json attrToJson(Attribute attr, Operation *op) {
  if (auto b = llvm::dyn_cast<BoolAttr>(attr))
    return b.getValue();
  if (auto i = llvm::dyn_cast<IntegerAttr>(attr))
    return i.getValue().getSExtValue();
  if (auto f = llvm::dyn_cast<FloatAttr>(attr))
    return f.getValueAsDouble();
  if (auto s = llvm::dyn_cast<StringAttr>(attr))
    return s.getValue().str();
  if (auto a = llvm::dyn_cast<DenseI64ArrayAttr>(attr))
    return std::vector<int64_t>(a.asArrayRef().begin(), a.asArrayRef().end());
  if (auto a = llvm::dyn_cast<DenseF64ArrayAttr>(attr))
    return std::vector<double>(a.asArrayRef().begin(), a.asArrayRef().end());
  if (llvm::isa<UnitAttr>(attr))
    return true;
  if (auto sym = llvm::dyn_cast<FlatSymbolRefAttr>(attr))
    return sym.getValue().str();
#define CPC_ENUM_ATTR(AttrClass, Enum)                                                                             \
  if (auto e = llvm::dyn_cast<AttrClass>(attr))                                                                    \
    return stringify##Enum(e.getValue()).str();
#include "dialects/cpc/CpcOpTable.h.inc"
  if (auto sharding = llvm::dyn_cast<ShardingAttr>(attr)) {
    nlohmann::json dims = nlohmann::json::array();
    for (unsigned d = 0; d < sharding.getDimAxes().size(); ++d) {
      std::vector<std::string> axes;
      for (StringRef a : sharding.getAxesOfDim(d))
        axes.push_back(a.str());
      dims.push_back(axes);
    }
    std::vector<std::string> partial;
    for (StringRef a : sharding.getPartialAxisNames())
      partial.push_back(a.str());
    return {{"mesh", sharding.getMesh().getValue().str()}, {"dim_axes", dims}, {"partial", partial}};
  }
  if (auto arr = llvm::dyn_cast<ArrayAttr>(attr)) {
    nlohmann::json j = nlohmann::json::array();
    for (Attribute a : arr)
      j.push_back(attrToJson(a, op));
    return j;
  }
  throw LoweringError(op, "cannot lower an attribute of " + op->getName().getStringRef().str());
}

nlohmann::json opAttrs(Operation *op) {
  nlohmann::json j = nlohmann::json::object();
  auto add = [&](DictionaryAttr dict) {
    if (dict)
      for (NamedAttribute a : dict)
        j[a.getName().str()] = attrToJson(a.getValue(), op);
  };
  add(llvm::dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute()));
  add(op->getDiscardableAttrDictionary());
  return j;
}

/// Appends the bytes of `attr` (row-major, plan element layout) to `out`.
void appendElements(DenseElementsAttr attr, std::vector<uint8_t> &out) {
  Type et = attr.getElementType();
  size_t count = attr.getNumElements();
  if (et.isInteger(1)) { // MLIR packs i1 as bits; plans store one byte each
    for (bool v : attr.getValues<bool>())
      out.push_back(v);
    return;
  }
  ArrayRef<char> raw = attr.getRawData();
  size_t elementBytes = et.getIntOrFloatBitWidth() / 8;
  if (attr.isSplat()) {
    for (size_t i = 0; i < count; ++i)
      out.insert(out.end(), raw.begin(), raw.begin() + elementBytes);
    return;
  }
  out.insert(out.end(), raw.begin(), raw.end());
}

/// Ops whose kernels may write the result over an input of the same size.
bool mayRunInPlace(Operation *op) {
  return llvm::isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp,
                   ReciprocalOp, ErfOp, TanhOp, SinOp, CosOp, SigmoidOp, ReluOp, GeluOp, NotOp>(op);
}

/// The steps reading each root buffer of a program, kept true as buffers become aliases.
class RootReads {
public:
  RootReads(const Plan &plan, const std::vector<StepDesc> &steps) : readers_(plan.buffers.size()) {
    for (int s = 0; s < (int)steps.size(); ++s)
      for (int b : steps[s].inputs)
        if (std::vector<int> &r = readers_[plan.rootOf(b)]; r.empty() || r.back() != s)
          r.push_back(s);
  }
  /// The first step after `step` that reads `root`, or -1.
  int firstAfter(int root, int step) const {
    auto it = std::upper_bound(readers_[root].begin(), readers_[root].end(), step);
    return it == readers_[root].end() ? -1 : *it;
  }
  /// The last step before `step` that reads `root`, or -1.
  int lastBefore(int root, int step) const {
    auto it = std::lower_bound(readers_[root].begin(), readers_[root].end(), step);
    return it == readers_[root].begin() ? -1 : *std::prev(it);
  }
  /// Root `from` became an alias of root `to`: its readers read `to`.
  void alias(int from, int to) {
    std::vector<int> merged;
    std::set_union(readers_[to].begin(), readers_[to].end(), readers_[from].begin(), readers_[from].end(),
                   std::back_inserter(merged));
    readers_[to] = std::move(merged);
    readers_[from].clear();
  }

private:
  std::vector<std::vector<int>> readers_;
};

class Builder {
public:
  Builder(std::shared_ptr<const WeightStore> weights, const PlanOptions &options)
      : weights_(std::move(weights)), options_(options) {
    plan_.blobFromPieces = true;
  }

  Plan build(ModuleOp module, const std::string &source) {
    plan_.mode = options_.mode;
    plan_.device = options_.device;
    plan_.source = source;
    plan_.training = options_.training;
    plan_.inference = options_.inference;
    // A module with a mesh compiles to one SPMD program per function, run by every rank.
    if (auto mesh = module.lookupSymbol<MeshOp>("mesh")) {
      plan_.meshShape.assign(mesh.getShape().begin(), mesh.getShape().end());
      for (Attribute a : mesh.getAxisNames())
        plan_.meshAxes.push_back(llvm::cast<StringAttr>(a).getValue().str());
      plan_.worldSize = mesh.getNumRanks();
      spmd_ = true;
    }
    for (const std::string &name : options_.functions) {
      auto func = module.lookupSymbol<func::FuncOp>(name);
      if (!func)
        throw LoweringError(module, "the module has no function @" + name);
      lowerFunction(func);
    }
    plan_.validate();
    // Every rank's collectives and point-to-point transfers must pair up: a plan in which some
    // rank would wait forever is not written.
    std::vector<int64_t> sendPeaks;
    if (!options_.priceOnly || planPipelineSchedule(plan_))
      if (std::string problem = checkPlanSchedule(plan_, &sendPeaks); !problem.empty() && options_.checkSchedule)
        throw LoweringError(module, "the plan would hang, " + problem);
    predictPeaks(sendPeaks);
    predictStep();
    return std::move(plan_);
  }

private:
  /// Per-function lowering state.
  struct Program {
    RankProgram desc;
    llvm::DenseMap<Value, int> bufferOf;
    std::vector<int> defStep;   // per plan buffer: the step of this program that writes it, or -1
    std::vector<bool> inPlaceCandidate;
    std::vector<std::pair<int, int>> assigns; // (step index of the copy, variable buffer)
    std::vector<Operation *> stepOps;         // per step: the op it lowers, for diagnostics
  };

  /// The predicted peak per rank: its arena, the persistent buffers its programs use, the
  /// collectives' scratch and, in a pipeline, the values its programs hand over between
  /// microbatches' forward and backward (as many microbatches as the schedule keeps in flight)
  /// and its buffered sends. The plan's predictedPeakBytes is the largest; a pipeline plan also
  /// records each rank's ("peak_bytes_per_rank").
  void predictPeaks(const std::vector<int64_t> &sendPeaks) {
    int64_t scratch = collectiveScratchBytes(plan_);
    std::optional<PipelineSchedule> schedule = planPipelineSchedule(plan_);
    std::vector<int64_t> peaks;
    std::map<std::vector<bool>, int64_t> byPrograms; // ranks that run the same programs hold alike
    for (int r = 0; r < std::max(plan_.worldSize, 1); ++r) {
      std::vector<bool> runs;
      for (const RankProgram &p : plan_.programs)
        runs.push_back(plan_.runsOn(p, r));
      auto [it, added] = byPrograms.try_emplace(runs, 0);
      if (added) {
        std::vector<bool> used = plan_.buffersOfRank(r);
        it->second = allocatedBytes(plan_.arenaBytesOfRank(r)) + scratch + kernelHostBytes(plan_, r);
        if (plan_.device == DeviceKind::Cpu) // the tables are host memory: a GPU's peak is the device's
          it->second += executorTableBytes(plan_, r);
        for (size_t b = 0; b < plan_.buffers.size(); ++b)
          if (used[b] && plan_.buffers[b].aliasOf < 0 && plan_.buffers[b].kind != BufferKind::Arena)
            it->second += allocatedBytes(plan_.buffers[b].bytes());
      }
      int64_t bytes = it->second;
      if (schedule) {
        bytes += handOverPeak(*schedule, r);
        bytes += r < (int)sendPeaks.size() ? sendPeaks[r] : 0;
      }
      peaks.push_back(bytes);
    }
    plan_.predictedPeakBytes = *std::max_element(peaks.begin(), peaks.end());
    if (schedule)
      plan_.runMetadata()["peak_bytes_per_rank"] = peaks;
  }

  /// What prices `step` (the lowering of `op`) in a cost profile: its class, its FLOPs (gemm and
  /// attention; the rest are priced by their bytes) and a GEMM's shape.
  static void setCost(StepDesc &step, Operation *op) {
    step.cost = costClass(op);
    step.bytes = movedBytes(op);
    step.flops = step.cost == CostClass::Gemm || step.cost == CostClass::Attention ? estimateFlops(op) : 0;
    if (std::optional<GemmDims> g = gemmDims(op))
      step.gemm = {g->batch, g->m, g->n, g->k};
  }

  /// The step time the plan predicts under the compile's cost profile: the slowest rank's, and
  /// each rank's ("predicted_step": compute, communication, idle and total seconds; see StepTime.h).
  void predictStep() {
    try {
      plan_.runMetadata()["predicted_step"] = predictedStepJson(plan_, options_.profile);
    } catch (const RuntimeError &) { // a schedule that cannot complete (--debug-unchecked): no step time
    }
  }

  /// What a buffer of `bytes` costs where it is allocated: on the host, the allocator's pages
  /// (HostMemory.h; GPT-small's 150 persistent buffers round up by 0.8 MB); a device's
  /// allocator is not modelled beyond the bytes.
  int64_t allocatedBytes(int64_t bytes) const {
    return plan_.device == DeviceKind::Cpu && bytes > 0 ? hostResidentBytes(bytes) : bytes;
  }


  /// The most bytes rank `rank` holds in hand-overs at once over its schedule.
  int64_t handOverPeak(const PipelineSchedule &schedule, int rank) const {
    int64_t stage = plan_.shardIndex(rank, {"pp"}), live = 0, peak = 0;
    std::map<std::pair<int64_t, int64_t>, int64_t> held; // (channel, microbatch) -> bytes
    for (const PipelineAction &a : schedule.actions.at(stage)) {
      const RankProgram &p =
          pipelineProgram(plan_, rank, a.backward ? ProgramPhase::Backward : ProgramPhase::Forward, a.chunk);
      for (const NamedBuffer &out : plan_.outputs)
        if (out.isTransfer() && out.program == p.name) {
          int64_t bytes = plan_.buffers[out.buffer].bytes();
          held[{out.transfer, a.microbatch}] = bytes;
          live += bytes;
        }
      peak = std::max(peak, live);
      for (const NamedBuffer &in : plan_.inputs)
        if (in.isTransfer() && in.program == p.name) {
          auto it = held.find({in.transfer, a.microbatch});
          if (it != held.end()) {
            live -= it->second;
            held.erase(it);
          }
        }
    }
    return peak;
  }

  int newBuffer(Type t, const std::string &name, BufferKind kind, Operation *where) {
    auto type = llvm::cast<RankedTensorType>(t);
    BufferDesc b;
    b.name = name;
    b.dtype = dtypeOf(type.getElementType(), where);
    b.shape.assign(type.getShape().begin(), type.getShape().end());
    b.kind = kind;
    b.space = options_.device == DeviceKind::Cpu ? MemorySpace::Host : MemorySpace::Device;
    plan_.buffers.push_back(b);
    return plan_.buffers.size() - 1;
  }

  /// Places `bytes` of data at the end of the blob, made by `fill` when the plan is written or
  /// read: the builder never holds the model's weights itself.
  size_t appendToBlob(size_t bytes, std::function<void(uint8_t *)> fill) {
    size_t offset = (plan_.blobPiecesSize + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
    plan_.blobPiecesSize = offset + bytes;
    if (bytes > 0)
      plan_.blobPieces.push_back(BlobPiece{offset, bytes, std::move(fill)});
    return offset;
  }

  int bufferOf(Program &p, Value v) {
    auto it = p.bufferOf.find(v);
    if (it == p.bufferOf.end())
      throw RuntimeError("value used before it is defined");
    return it->second;
  }

  /// The persistent buffer of `variable`, made on its first read or write: a parameter starts at
  /// the model's weight of its name, a state at its init.
  int variableBuffer(VariableOp variable) {
    auto it = variables_.find(variable);
    if (it != variables_.end())
      return it->second;
    std::string name = variable.getSymName().str();
    int b = newBuffer(variable.getType(), name, variable.isParameter() ? BufferKind::Parameter : BufferKind::State,
                      variable);
    setSharding(plan_.buffers[b], variable.getGlobalShapeAttr(), variable.getShardingAttr());
    if (auto view = variable.getStoredViewAttr()) { // kept in another element order than the model's
      plan_.buffers[b].storedView.assign(view.asArrayRef().begin(), view.asArrayRef().end());
      auto perm = variable.getStoredPermAttr().asArrayRef();
      plan_.buffers[b].storedPerm.assign(perm.begin(), perm.end());
    }
    if (variable.isParameter()) {
      initializeParameter(plan_.buffers[b], variable);
    } else {
      // The plan's roles carry the dialect's names (runtime/Plan.h).
      plan_.buffers[b].role = planRole<VariableRole>(*variable.getRole());
      if (auto init = variable.getInitAttr())
        plan_.buffers[b].init = init.getValueAsDouble();
    }
    return variables_[variable] = b;
  }

  /// A parameter's initial value: the model's weight (the blob keeps the whole value), in the
  /// variable's stored element order; none with synthetic parameters (the runtime makes them).
  void initializeParameter(BufferDesc &desc, VariableOp param) {
    std::string name = param.getSymName().str();
    desc.trainable = param.getTrainable();
    if (!weights_->contains(name))
      throw LoweringError(param, "the model has no initial value for parameter '" + name + "'");
    if (weights_->byteSize(name) != desc.storedBytes())
      throw LoweringError(param, "the model's value of parameter '" + name + "' holds " + std::to_string(weights_->byteSize(name)) +
                         " bytes, its type needs " + std::to_string(desc.storedBytes()));
    size_t bytes = desc.storedBytes();
    if (options_.syntheticParameters) {
      desc.synthetic = true;
      return;
    }
    desc.offset = appendToBlob(bytes, [weights = weights_, name, bytes, view = desc.storedView,
                                       perm = desc.storedPerm, elementBytes = dtypeSize(desc.dtype)](uint8_t *dst) {
      if (view.empty())
        return weights->read(name, dst);
      std::vector<uint8_t> model(bytes);
      weights->read(name, model.data());
      permuteElements(model.data(), dst, view, perm, elementBytes, false);
    });
  }

  /// The variable `ref` names (the verifier has checked that there is one).
  VariableOp variableOf(Operation *user, FlatSymbolRefAttr ref) {
    return symbols_.lookupNearestSymbolFrom<VariableOp>(user, ref);
  }

  /// The mesh axes of each of a block's `rank` dims (none for an unsharded variable).
  static std::vector<std::vector<std::string>> shardDimsOf(ShardingAttr sharding, size_t rank) {
    std::vector<std::vector<std::string>> dims;
    for (unsigned d = 0; sharding && d < rank; ++d) {
      dims.emplace_back();
      for (StringRef axis : sharding.getAxesOfDim(d))
        dims.back().push_back(axis.str());
    }
    return dims;
  }

  /// A sharded variable's global shape and the mesh axes of each dim of its block.
  static void setSharding(BufferDesc &desc, DenseI64ArrayAttr globalShape, ShardingAttr sharding) {
    if (!sharding)
      return;
    desc.globalShape.assign(globalShape.asArrayRef().begin(), globalShape.asArrayRef().end());
    desc.shardDims = shardDimsOf(sharding, desc.shape.size());
  }

  void lowerFunction(func::FuncOp func) {
    Program p;
    p.desc.name = func.getSymName().str();
    p.desc.rank = spmd_ ? -1 : 0;
    if (auto phase = getPhase(func))
      p.desc.phase = planRole<ProgramPhase>(*phase);
    if (auto stage = getPipelineRank(func)) // a pipeline stage's program: the ranks at pp = stage
      p.desc.coordinates.push_back({"pp", *stage});
    if (auto chunk = func->getAttrOfType<IntegerAttr>(kPipelineChunkAttrName))
      p.desc.chunk = chunk.getInt();
    p.defStep.assign(plan_.buffers.size(), -1);
    auto grow = [&] { p.defStep.resize(plan_.buffers.size(), -1); };
    for (BlockArgument arg : func.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "cpc.name");
      auto transfer = func.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(), kTransferAttrName);
      std::string n = name       ? name.getValue().str()
                      : transfer ? "transfer." + std::to_string(transfer.getInt())
                                 : "arg" + std::to_string(arg.getArgNumber());
      int b = newBuffer(arg.getType(), n, BufferKind::Input, func);
      p.bufferOf[arg] = b;
      RuntimeInputKind runtime = RuntimeInputKind::None;
      if (auto input = getRuntimeInput(func, arg.getArgNumber()))
        runtime = planRole<RuntimeInputKind>(*input);
      plan_.inputs.push_back({n, b, p.desc.name, runtime, transfer ? transfer.getInt() : -1});
    }
    for (Operation &op : func.getBody().front()) {
      lower(p, &op, func);
      grow();
    }
    finishMemory(p);
    plan_.programs.push_back(std::move(p.desc));
  }

  /// Before `assign` overwrites variable buffer `var`: a result of the function that reads the
  /// variable (the loss scale a step used) is copied first, so that it keeps the value it read
  /// once the program has run.
  void keepReturnedReads(Program &p, int var, AssignOp assign, func::FuncOp func) {
    Operation *ret = func.getBody().front().getTerminator();
    for (Value v : ret->getOperands()) {
      auto it = p.bufferOf.find(v);
      if (it == p.bufferOf.end() || plan_.rootOf(it->second) != var)
        continue;
      StepDesc step;
      step.op = OpKind::Copy;
      step.loc = "copy of " + plan_.buffers[var].name + " before its assign";
      step.inputs.push_back(it->second);
      int copy = newBuffer(v.getType(), step.loc, BufferKind::Arena, assign);
      p.defStep.resize(plan_.buffers.size(), -1);
      p.defStep[copy] = p.desc.steps.size();
      step.outputs.push_back(copy);
      p.inPlaceCandidate.push_back(false);
      p.desc.steps.push_back(std::move(step));
      p.stepOps.push_back(assign);
      it->second = copy;
    }
  }

  void lower(Program &p, Operation *op, func::FuncOp func) {
    std::string name = locName(op->getLoc());
    if (auto param = llvm::dyn_cast<ParameterOp>(op)) {
      p.bufferOf[param] = variableBuffer(variableOf(op, param.getNameAttr()));
      return;
    }
    if (auto state = llvm::dyn_cast<StateOp>(op)) {
      p.bufferOf[state] = variableBuffer(variableOf(op, state.getNameAttr()));
      return;
    }
    if (auto constant = llvm::dyn_cast<ConstantOp>(op)) {
      auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense)
        throw LoweringError(op, "a constant that is not a dense tensor has no plan form");
      int b = newBuffer(constant.getType(), name.empty() ? "const" : name, BufferKind::Constant, op);
      auto bytes = std::make_shared<std::vector<uint8_t>>();
      appendElements(dense, *bytes);
      plan_.buffers[b].offset = appendToBlob(bytes->size(), [bytes](uint8_t *dst) {
        std::memcpy(dst, bytes->data(), bytes->size());
      });
      p.bufferOf[constant] = b;
      return;
    }
    if (auto reshape = llvm::dyn_cast<ReshapeOp>(op)) {
      int in = bufferOf(p, reshape.getInput());
      int b = newBuffer(reshape.getType(), name, plan_.buffers[plan_.rootOf(in)].kind, op);
      plan_.buffers[b].aliasOf = in; // a view: same bytes, new shape
      p.bufferOf[reshape] = b;
      return;
    }
    if (auto ret = llvm::dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        auto n = func.getResultAttrOfType<StringAttr>(i, "cpc.name");
        auto transfer = func.getResultAttrOfType<IntegerAttr>(i, kTransferAttrName);
        std::string label = n          ? n.getValue().str()
                            : transfer ? "transfer." + std::to_string(transfer.getInt())
                                       : "output" + std::to_string(i);
        plan_.outputs.push_back(
            {label, bufferOf(p, v), p.desc.name, RuntimeInputKind::None, transfer ? transfer.getInt() : -1});
      }
      return;
    }
    StepDesc step;
    step.loc = name.empty() ? op->getName().getStringRef().str() : name;
    setCost(step, op);
    if (auto assign = llvm::dyn_cast<AssignOp>(op)) {
      int variable = variableBuffer(variableOf(op, assign.getNameAttr()));
      keepReturnedReads(p, variable, assign, func);
      step.op = OpKind::Assign;
      step.attrs = opAttrs(op); // the variable's name, for messages: the step holds its buffer
      step.inputs.push_back(bufferOf(p, assign.getValue()));
      step.outputs.push_back(variable);
      p.assigns.push_back({(int)p.desc.steps.size(), variable});
      p.inPlaceCandidate.push_back(false);
      p.desc.steps.push_back(std::move(step));
      p.stepOps.push_back(op);
      return;
    }
    std::optional<OpKind> kind = findOpKind(op->getName().getStringRef()); // none outside the cpc dialect
    if (!kind)
      throw LoweringError(op, "no kernel runs " + op->getName().getStringRef().str() + ": it cannot be in a plan");
    step.op = *kind;
    step.attrs = opAttrs(op);
    for (Value v : op->getOperands())
      step.inputs.push_back(bufferOf(p, v));
    int index = p.desc.steps.size();
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      int b = newBuffer(r.getType(), op->getNumResults() > 1 ? step.loc + "#" + std::to_string(i) : step.loc,
                        BufferKind::Arena, op);
      p.defStep.resize(plan_.buffers.size(), -1);
      p.defStep[b] = index;
      p.bufferOf[r] = b;
      step.outputs.push_back(b);
    }
    p.inPlaceCandidate.push_back(options_.inPlace && (mayRunInPlace(op) || llvm::isa<AdamWOp, MultiTensorAdamWOp>(op)));
    p.desc.steps.push_back(std::move(step));
    p.stepOps.push_back(op);
  }

  // Over 80 lines: lifetimes, direct writes, in-place reuse and the layout read and update one table of
  // buffer intervals in order.
  /// Lifetimes, direct writes into variables, in-place reuse, then the arena layout.
  void finishMemory(Program &p) {
    auto &steps = p.desc.steps;
    int end = steps.size();
    size_t n = plan_.buffers.size();
    std::vector<int> lastUse(n, -1);
    for (int s = 0; s < end; ++s)
      for (int b : steps[s].inputs)
        lastUse[b] = std::max(lastUse[b], s);
    for (const auto &out : plan_.outputs)
      if (out.program == p.desc.name)
        lastUse[out.buffer] = end;
    auto rootLast = [&](std::vector<int> &last) {
      std::vector<int> rl(n, -1);
      for (size_t b = 0; b < n; ++b) {
        int r = plan_.rootOf(b);
        rl[r] = std::max({rl[r], last[b], p.defStep[b]});
      }
      return rl;
    };
    std::vector<int> rl = rootLast(lastUse);

    // The steps that read each root buffer, in order: the checks below ask it once per assign
    // (a scan of the steps per assign was quadratic in an optimizer's program).
    RootReads reads(plan_, steps);

    // A variable must not be read after it is assigned (the plan has one buffer per variable).
    for (auto [assignStep, var] : p.assigns)
      if (int s = reads.firstAfter(var, assignStep); s >= 0)
        throw LoweringError(p.stepOps[s], "reads @" + plan_.buffers[var].name + " as it was before the assign at step " +
                                              std::to_string(assignStep) +
                                              ": a plan keeps one buffer per variable, so reads come first");

    // Let the producer of an assigned value write the variable itself when nothing reads the
    // variable's old value afterwards and the producer may run in place (or does not read it).
    std::vector<bool> dropped(end, false);
    if (options_.inPlace) {
      for (auto [assignStep, var] : p.assigns) {
        // The assigned value may be a view (reshape) of the producer's result: the producer then
        // writes the variable's bytes, which the view reinterprets.
        int value = plan_.rootOf(steps[assignStep].inputs[0]);
        if (plan_.buffers[value].aliasOf >= 0 || plan_.buffers[value].kind != BufferKind::Arena ||
            plan_.buffers[value].bytes() != plan_.buffers[var].bytes())
          continue;
        int producer = p.defStep[value];
        if (producer < 0 || rl[value] != assignStep)
          continue;
        int lastVarRead = reads.lastBefore(var, assignStep);
        bool readsVar = lastVarRead == producer;
        if (lastVarRead > producer ||
            (readsVar && (!p.inPlaceCandidate[producer] || plan_.buffers[value].shape != plan_.buffers[var].shape)))
          continue;
        // Writing in place is safe for an element-by-element producer reading the variable
        // once, as the operand its result replaces; read twice (by a multi-tensor update as
        // another tensor's gradient, say) it could be read after it was overwritten.
        if (readsVar && std::count_if(steps[producer].inputs.begin(), steps[producer].inputs.end(),
                                      [&](int b) { return plan_.rootOf(b) == var; }) > 1)
          continue;
        plan_.buffers[value].aliasOf = var;
        reads.alias(value, var);
        dropped[assignStep] = true;
      }
    }

    for (int s = 0; s < end; ++s) {
      if (!p.inPlaceCandidate[s] || steps[s].outputs.size() != 1 || plan_.buffers[steps[s].outputs[0]].aliasOf >= 0)
        continue;
      int out = steps[s].outputs[0];
      for (int in : steps[s].inputs) {
        int r = plan_.rootOf(in);
        const BufferDesc &rb = plan_.buffers[r];
        if (rb.kind != BufferKind::Arena || rl[r] != s || rb.bytes() != plan_.buffers[out].bytes() ||
            plan_.buffers[in].shape != plan_.buffers[out].shape)
          continue;
        plan_.buffers[out].aliasOf = r;
        rl[r] = std::max(rl[r], rl[out]);
        break;
      }
    }

    // An all-reduce sums in place: each output may take its input's memory when that input is
    // not read afterwards (a bucket of gradients then needs no second copy).
    for (int s = 0; s < end; ++s) {
      if (!options_.inPlace || !hasTrait(steps[s].op, PlanTrait::MayRunInPlace))
        continue;
      for (size_t i = 0; i < steps[s].inputs.size(); ++i) {
        int in = steps[s].inputs[i], out = steps[s].outputs[i], r = plan_.rootOf(in);
        const BufferDesc &rb = plan_.buffers[r];
        // Two members on one memory (x and a view of x) would be written back over bytes the
        // other has not packed yet.
        int sameRoot = 0;
        for (int other : steps[s].inputs)
          sameRoot += plan_.rootOf(other) == r;
        if (plan_.buffers[out].aliasOf >= 0 || rb.kind != BufferKind::Arena || rl[r] != s ||
            rb.bytes() != plan_.buffers[out].bytes() || sameRoot > 1)
          continue;
        plan_.buffers[out].aliasOf = r;
        rl[r] = std::max(rl[r], rl[out]);
      }
    }

    // Drop the copies that became direct writes, renumbering steps.
    if (std::find(dropped.begin(), dropped.end(), true) != dropped.end()) {
      std::vector<StepDesc> kept;
      std::vector<int> newIndex(end, -1);
      for (int s = 0; s < end; ++s)
        if (!dropped[s]) {
          newIndex[s] = kept.size();
          kept.push_back(std::move(steps[s]));
        }
      steps = std::move(kept);
      for (int &d : p.defStep)
        if (d >= 0)
          d = newIndex[d];
      for (int &r : rl)
        if (r >= 0)
          r = r >= end ? (int)steps.size() : (newIndex[r] >= 0 ? newIndex[r] : r);
    }

    std::vector<int> roots;
    std::vector<LiveRange> ranges;
    for (size_t b = 0; b < n; ++b) {
      const BufferDesc &d = plan_.buffers[b];
      if (d.kind != BufferKind::Arena || d.aliasOf >= 0 || p.defStep[b] < 0)
        continue;
      roots.push_back(b);
      ranges.push_back({(int64_t)d.bytes(), p.defStep[b], std::max(p.defStep[b], rl[b])});
    }
    ArenaLayout layout = planArena(ranges, kPlanAlignment);
    for (size_t i = 0; i < roots.size(); ++i)
      plan_.buffers[roots[i]].offset = layout.offsets[i];
    p.desc.arenaBytes = layout.totalBytes;
  }

  std::shared_ptr<const WeightStore> weights_; // kept by the plan's blob pieces until they are written
  PlanOptions options_;
  Plan plan_;
  llvm::DenseMap<Operation *, int> variables_; // cpc.variable -> its persistent buffer
  SymbolTableCollection symbols_;
  bool spmd_ = false;
};

} // namespace

FailureOr<Plan> buildPlan(ModuleOp module, std::shared_ptr<const WeightStore> weights, const std::string &source,
                          const PlanOptions &options) {
  try {
    return Builder(std::move(weights), options).build(module, source);
  } catch (const LoweringError &e) {
    e.where->emitError(e.what());
    return failure();
  }
}

} // namespace cpc
