//===- PlanBuilder.cpp ----------------------------------------------------===//
#include "compiler/PlanBuilder.h"
#include "compiler/MemoryPlanner.h"
#include "dialects/cpc/CpcDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringSet.h"

#include <cstring>

using namespace mlir;

namespace cpc {

namespace {

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
  throw RuntimeError("element type " + s + " of " + where->getName().getStringRef().str() + " has no plan type");
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
  if (llvm::isa<UnitAttr>(attr))
    return true;
  if (auto sym = llvm::dyn_cast<FlatSymbolRefAttr>(attr))
    return sym.getValue().str();
  if (auto arr = llvm::dyn_cast<ArrayAttr>(attr)) {
    nlohmann::json j = nlohmann::json::array();
    for (Attribute a : arr)
      j.push_back(attrToJson(a, op));
    return j;
  }
  throw RuntimeError("cannot lower an attribute of " + op->getName().getStringRef().str());
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
                   ReciprocalOp, ErfOp, TanhOp, SigmoidOp, ReluOp, GeluOp, NotOp>(op);
}

class Builder {
public:
  Builder(const WeightStore &weights, const PlanOptions &options) : weights_(weights), options_(options) {}

  Plan build(func::FuncOp func, const std::string &source) {
    plan_.mode = options_.mode;
    plan_.source = source;
    plan_.programs.resize(1);
    for (BlockArgument arg : func.getArguments()) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "cpc.name");
      std::string n = name ? name.getValue().str() : "arg" + std::to_string(arg.getArgNumber());
      int b = addBuffer(arg, n, BufferKind::Input, func);
      plan_.inputs.push_back({n, b});
    }
    for (Operation &op : func.getBody().front())
      lower(&op, func);
    finishMemory();
    plan_.predictedPeakBytes = plan_.programs[0].arenaBytes + plan_.bytesOfKind(BufferKind::Parameter) +
                               plan_.bytesOfKind(BufferKind::Constant) + plan_.bytesOfKind(BufferKind::Input);
    plan_.validate();
    return std::move(plan_);
  }

private:
  int addBuffer(Value v, const std::string &name, BufferKind kind, Operation *where) {
    auto type = llvm::cast<RankedTensorType>(v.getType());
    BufferDesc b;
    b.name = name;
    b.dtype = dtypeOf(type.getElementType(), where);
    b.shape.assign(type.getShape().begin(), type.getShape().end());
    b.kind = kind;
    plan_.buffers.push_back(b);
    int id = plan_.buffers.size() - 1;
    bufferOf_[v] = id;
    defStep_.push_back(-1);
    return id;
  }

  size_t appendToBlob(size_t bytes) {
    size_t offset = (plan_.blob.size() + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
    plan_.blob.resize(offset + bytes);
    return offset;
  }

  int bufferOf(Value v) {
    auto it = bufferOf_.find(v);
    if (it == bufferOf_.end())
      throw RuntimeError("value used before it is defined");
    return it->second;
  }

  void lower(Operation *op, func::FuncOp func) {
    std::string name = locName(op->getLoc());
    if (auto param = llvm::dyn_cast<ParameterOp>(op)) {
      std::string pname = param.getName().str();
      int b = addBuffer(param, pname, BufferKind::Parameter, op);
      BufferDesc &desc = plan_.buffers[b];
      desc.trainable = param.getTrainable();
      if (!weights_.contains(pname))
        throw RuntimeError("parameter '" + pname + "' has no initial value in the model");
      if (weights_.byteSize(pname) != desc.bytes())
        throw RuntimeError("parameter '" + pname + "' holds " + std::to_string(weights_.byteSize(pname)) +
                           " bytes, its type needs " + std::to_string(desc.bytes()));
      size_t bytes = desc.bytes();
      desc.offset = appendToBlob(bytes);
      weights_.read(pname, plan_.blob.data() + desc.offset);
      return;
    }
    if (auto constant = llvm::dyn_cast<ConstantOp>(op)) {
      auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense)
        throw RuntimeError("constant at " + name + " is not a dense tensor");
      int b = addBuffer(constant, name.empty() ? "const" : name, BufferKind::Constant, op);
      std::vector<uint8_t> bytes;
      appendElements(dense, bytes);
      size_t offset = appendToBlob(bytes.size());
      std::memcpy(plan_.blob.data() + offset, bytes.data(), bytes.size());
      plan_.buffers[b].offset = offset;
      return;
    }
    if (auto reshape = llvm::dyn_cast<ReshapeOp>(op)) {
      int in = bufferOf(reshape.getInput());
      int b = addBuffer(reshape, name, plan_.buffers[plan_.rootOf(in)].kind, op);
      plan_.buffers[b].aliasOf = in; // a view: same bytes, new shape
      return;
    }
    if (auto ret = llvm::dyn_cast<func::ReturnOp>(op)) {
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        auto n = func.getResultAttrOfType<StringAttr>(i, "cpc.name");
        plan_.outputs.push_back({n ? n.getValue().str() : "output" + std::to_string(i), bufferOf(v)});
      }
      return;
    }
    if (!llvm::isa<CpcDialect>(op->getDialect()))
      throw RuntimeError("cannot lower " + op->getName().getStringRef().str() + " at " + name);
    StepDesc step;
    step.op = op->getName().getStringRef().str();
    step.loc = name.empty() ? step.op : name;
    step.attrs = opAttrs(op);
    for (Value v : op->getOperands())
      step.inputs.push_back(bufferOf(v));
    int index = plan_.programs[0].steps.size();
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      int b = addBuffer(r, op->getNumResults() > 1 ? step.loc + "#" + std::to_string(i) : step.loc, BufferKind::Arena, op);
      defStep_[b] = index;
      step.outputs.push_back(b);
    }
    inPlaceCandidate_.push_back(options_.inPlace && mayRunInPlace(op));
    plan_.programs[0].steps.push_back(std::move(step));
  }

  /// Lifetimes, in-place reuse, then the arena layout.
  void finishMemory() {
    auto &steps = plan_.programs[0].steps;
    int end = steps.size();
    std::vector<int> lastUse(plan_.buffers.size(), -1);
    for (int s = 0; s < end; ++s)
      for (int b : steps[s].inputs)
        lastUse[b] = std::max(lastUse[b], s);
    for (const auto &out : plan_.outputs)
      lastUse[out.buffer] = end;
    // Root-level last use: a view keeps the memory it looks at alive.
    std::vector<int> rootLast(plan_.buffers.size(), -1);
    for (size_t b = 0; b < plan_.buffers.size(); ++b) {
      int r = plan_.rootOf(b);
      rootLast[r] = std::max({rootLast[r], lastUse[b], defStep_[b]});
    }
    for (int s = 0; s < end; ++s) {
      if (!inPlaceCandidate_[s] || steps[s].outputs.size() != 1)
        continue;
      int out = steps[s].outputs[0];
      for (int in : steps[s].inputs) {
        int r = plan_.rootOf(in);
        const BufferDesc &rb = plan_.buffers[r];
        if (rb.kind != BufferKind::Arena || rootLast[r] != s || rb.bytes() != plan_.buffers[out].bytes() ||
            plan_.buffers[in].shape != plan_.buffers[out].shape)
          continue;
        plan_.buffers[out].aliasOf = r;
        rootLast[r] = std::max(rootLast[r], rootLast[out]);
        break;
      }
    }
    std::vector<int> roots;
    std::vector<LiveRange> ranges;
    for (size_t b = 0; b < plan_.buffers.size(); ++b) {
      const BufferDesc &d = plan_.buffers[b];
      if (d.kind != BufferKind::Arena || d.aliasOf >= 0)
        continue;
      roots.push_back(b);
      ranges.push_back({(int64_t)d.bytes(), defStep_[b], std::max(defStep_[b], rootLast[b])});
    }
    ArenaLayout layout = planArena(ranges, kPlanAlignment);
    for (size_t i = 0; i < roots.size(); ++i)
      plan_.buffers[roots[i]].offset = layout.offsets[i];
    plan_.programs[0].arenaBytes = layout.totalBytes;
  }

  const WeightStore &weights_;
  PlanOptions options_;
  Plan plan_;
  llvm::DenseMap<Value, int> bufferOf_;
  std::vector<int> defStep_;
  std::vector<bool> inPlaceCandidate_;
};

} // namespace

Plan buildPlan(ModuleOp module, const WeightStore &weights, const std::string &source, const PlanOptions &options) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func)
    throw RuntimeError("the module has no function @main");
  return Builder(weights, options).build(func, source);
}

} // namespace cpc
