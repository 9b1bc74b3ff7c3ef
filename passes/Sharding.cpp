//===- Sharding.cpp - layouts shared by the sharding passes ---------------===//
#include "passes/Sharding.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace cpc {

Layout Layout::fromAttr(ShardingAttr attr) {
  Layout l = whole(attr.getDimAxes().size());
  for (unsigned d = 0; d < l.dims.size(); ++d)
    for (StringRef a : attr.getAxesOfDim(d))
      l.dims[d].push_back(a.str());
  for (StringRef a : attr.getPartialAxisNames())
    l.partial.push_back(a.str());
  if (!l.partial.empty())
    l.reduction = attr.getReduction();
  return l;
}

bool Layout::uses(StringRef axis) const {
  return llvm::is_contained(partial, axis) ||
         llvm::any_of(dims, [&](const MeshAxes &d) { return llvm::is_contained(d, axis); });
}

FailureOr<MeshOp> getOrCreateMesh(ModuleOp module, ArrayRef<MeshAxisSpec> axes) {
  if (auto mesh = module.lookupSymbol<MeshOp>("mesh")) {
    for (const MeshAxisSpec &axis : axes) {
      if (mesh.getAxisSize(axis.name) != axis.size)
        return mesh.emitError("@mesh exists but has no axis ") << axis.name << " of size " << axis.size;
      if (axis.role != MeshAxisRole::None && mesh.getAxisRole(axis.name) != axis.role)
        return mesh.emitError("@mesh exists but its axis ")
               << axis.name << " is not the " << stringifyMeshAxisRole(axis.role) << " axis";
    }
    return mesh;
  }
  OpBuilder b(module.getContext());
  b.setInsertionPointToStart(module.getBody());
  SmallVector<int64_t> shape;
  SmallVector<StringRef> names;
  SmallVector<Attribute> roles;
  bool anyRole = false;
  for (const MeshAxisSpec &axis : axes) {
    names.push_back(axis.name);
    shape.push_back(axis.size);
    roles.push_back(MeshAxisRoleAttr::get(module.getContext(), axis.role));
    anyRole |= axis.role != MeshAxisRole::None;
  }
  return b.create<MeshOp>(module.getLoc(), b.getStringAttr("mesh"), b.getDenseI64ArrayAttr(shape),
                          b.getStrArrayAttr(names), anyRole ? b.getArrayAttr(roles) : ArrayAttr());
}

ShardingAttr Layout::toAttr(FlatSymbolRefAttr mesh, int64_t priority) const {
  Builder b(mesh.getContext());
  SmallVector<Attribute> dimAttrs;
  for (const MeshAxes &axes : dims)
    dimAttrs.push_back(b.getStrArrayAttr(SmallVector<StringRef>(axes.begin(), axes.end())));
  ArrayAttr partialAttr;
  if (!partial.empty())
    partialAttr = b.getStrArrayAttr(SmallVector<StringRef>(partial.begin(), partial.end()));
  return ShardingAttr::get(mesh.getContext(), mesh, b.getArrayAttr(dimAttrs), partialAttr,
                           partial.empty() ? ReductionKind::Sum : reduction, priority);
}

std::string Layout::describe() const {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    s += d ? ", " : "";
    s += dims[d].empty() ? "-" : llvm::join(dims[d], "*");
  }
  s += "]";
  if (!partial.empty())
    s += std::string(reduction == ReductionKind::Sum ? " partial(" : " partial max(") + llvm::join(partial, ",") + ")";
  return s;
}

bool isParameterUpdate(Operation *user, StringRef name) {
  if (llvm::isa<AdamWOp>(user))
    return true;
  return !user->use_empty() && llvm::all_of(user->getUsers(), [&](Operation *u) {
    auto assign = llvm::dyn_cast<AssignOp>(u);
    return assign && assign.getName() == name;
  });
}

MeshAxes batchAxes(const Mesh &mesh) {
  MeshAxes axes;
  for (Attribute a : mesh.op().getAxisNames()) {
    StringRef name = llvm::cast<StringAttr>(a).getValue();
    MeshAxisRole role = mesh.roleOf(name);
    bool splitsBatch = name == "dp" || role == MeshAxisRole::TensorDepth || role == MeshAxisRole::TensorRow ||
                       role == MeshAxisRole::TensorWeight || role == MeshAxisRole::TensorInput;
    if (splitsBatch && mesh.parts({name.str()}) > 1)
      axes.push_back(name.str());
  }
  return axes;
}

int64_t Mesh::sizeOf(MeshAxisRole role) const {
  std::string axis = axisWith(role);
  return axis.empty() ? 1 : parts({axis});
}

FlatSymbolRefAttr Mesh::ref() const { return FlatSymbolRefAttr::get(op_.getContext(), op_.getSymName()); }

int64_t Mesh::axisIndex(StringRef name) const {
  for (auto [i, a] : llvm::enumerate(op_.getAxisNames()))
    if (llvm::cast<StringAttr>(a).getValue() == name)
      return i;
  return -1;
}

bool Mesh::inOrder(ArrayRef<std::string> axes) const {
  for (size_t i = 1; i < axes.size(); ++i)
    if (axisIndex(axes[i - 1]) > axisIndex(axes[i]))
      return false;
  return true;
}

int64_t Mesh::parts(ArrayRef<std::string> axes) const {
  int64_t n = 1;
  for (const std::string &a : axes)
    n *= std::max<int64_t>(op_.getAxisSize(a), 1);
  return n;
}

FailureOr<MeshOp> findAnnotatedMesh(func::FuncOp func) {
  FlatSymbolRefAttr name;
  Operation *first = nullptr;
  auto note = [&](Attribute attr, Operation *where) -> LogicalResult {
    auto sharding = llvm::dyn_cast_or_null<ShardingAttr>(attr);
    if (!sharding)
      return attr ? where->emitError("expects #cpc.sharding attributes, got ") << attr : success();
    if (name && name != sharding.getMesh())
      return where->emitError("shardings over two meshes, ") << name << " and " << sharding.getMesh()
                                                              << ", are not supported";
    name = sharding.getMesh();
    first = first ? first : where;
    return success();
  };
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (failed(note(func.getArgAttr(i, kArgShardingAttr), func)))
      return failure();
  WalkResult walk = func.walk([&](Operation *op) {
    if (auto shard = llvm::dyn_cast<ShardOp>(op))
      if (failed(note(shard.getSharding(), op)))
        return WalkResult::interrupt();
    if (Attribute attr = op->getAttr(kResultShardingsAttr)) {
      auto list = llvm::dyn_cast<ArrayAttr>(attr);
      if (!list || list.size() != op->getNumResults()) {
        op->emitError("'") << kResultShardingsAttr << "' must list one #cpc.sharding per result";
        return WalkResult::interrupt();
      }
      for (Attribute a : list)
        if (failed(note(a, op)))
          return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  if (!name)
    return MeshOp();
  auto mesh = SymbolTable::lookupNearestSymbolFrom<MeshOp>(func, name);
  if (!mesh)
    return first->emitError("sharding refers to unknown mesh ") << name;
  return mesh;
}

FailureOr<Layout> readLayout(ShardingAttr attr, Value v, const Mesh &mesh, Operation *where) {
  Layout l = Layout::fromAttr(attr);
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  if (!type || (int64_t)l.dims.size() != type.getRank())
    return where->emitError("sharding ") << attr << " does not match the type " << v.getType();
  auto known = [&](ArrayRef<std::string> axes) -> LogicalResult {
    for (const std::string &a : axes)
      if (!mesh.hasAxis(a))
        return where->emitError("mesh '") << mesh.op().getSymName() << "' has no axis '" << a << "'";
    return success();
  };
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (failed(known(l.dims[d])))
      return failure();
    // Blocks are numbered major to minor over the dim's axes, in the dim's order (3D weights are
    // split over (tp_in, tp_wt)); a collective's group follows the mesh's order, so partitioning
    // moves a dim whose axes are in another order one axis at a time (Mesh::inOrder).
    if (type.getDimSize(d) % mesh.parts(l.dims[d]))
      return where->emitError("dim ") << d << " of size " << type.getDimSize(d) << " does not split into "
                                      << mesh.parts(l.dims[d]) << " blocks";
  }
  if (failed(known(l.partial)))
    return failure();
  return l;
}

void collectFactorAxes(FactorAxes &factorAxes, const Layout &l, ArrayRef<ShardingRule::DimFactors> dims,
                       const ShardingRule &rule, const Mesh &mesh) {
  // A mesh axis splits one factor of an op at most: a second would split one value's dims
  // twice over it (e.g. x + transpose(x) with x split on dim 0), so that factor stays whole.
  auto taken = [&](const MeshAxes &axes) {
    return llvm::any_of(factorAxes, [&](const MeshAxes &other) {
      return llvm::any_of(axes, [&](const std::string &a) { return llvm::is_contained(other, a); });
    });
  };
  for (auto [d, factors] : llvm::enumerate(dims)) {
    ArrayRef<std::string> axes = l.dims[d];
    size_t next = 0;
    for (int64_t f : factors) {
      int64_t size = rule.factors[f].size, covered = 1;
      MeshAxes take;
      while (next < axes.size() && size % (covered * mesh.parts(axes[next])) == 0) {
        covered *= mesh.parts(axes[next]);
        take.push_back(axes[next++]);
      }
      if (take.empty())
        break; // the next axis does not fit this factor: the rest of the dim maps to nothing
      if (factorAxes[f].empty() && rule.maySplit(f) && !taken(take))
        factorAxes[f] = take;
      if (covered != size)
        break;
    }
  }
}

void legalizeFactorAxes(FactorAxes &factorAxes, const ShardingRule &rule, const Mesh &mesh) {
  for (int64_t f = 0; f < rule.numFactors(); ++f)
    if (!rule.maySplit(f) || rule.factors[f].size % mesh.parts(factorAxes[f]))
      factorAxes[f].clear();
  // Dropping one split can make a minor factor's unexpressible: repeat until nothing changes.
  bool changed = true;
  auto visit = [&](const ShardingRule::TensorFactors &tensor) {
    for (const ShardingRule::DimFactors &dim : tensor) {
      bool open = true; // every factor so far is split completely
      for (int64_t f : dim) {
        if (factorAxes[f].empty()) {
          open = false;
          continue;
        }
        if (!open) {
          factorAxes[f].clear();
          changed = true;
          continue;
        }
        open = mesh.parts(factorAxes[f]) == rule.factors[f].size;
      }
    }
  };
  while (changed) {
    changed = false;
    for (const auto &t : rule.operands)
      visit(t);
    for (const auto &t : rule.results)
      visit(t);
  }
}

FactorAxes factorAxesOf(Operation *op, const ShardingRule &rule, const Mesh &mesh, bool resultsFirst,
                        function_ref<Layout(Value)> resultOf, function_ref<Layout(OpOperand &)> operandOf) {
  FactorAxes factorAxes(rule.numFactors());
  auto results = [&] {
    for (auto [v, dims] : llvm::zip(op->getResults(), rule.results))
      collectFactorAxes(factorAxes, resultOf(v), dims, rule, mesh);
  };
  if (resultsFirst)
    results();
  for (auto [operand, dims] : llvm::zip(op->getOpOperands(), rule.operands))
    collectFactorAxes(factorAxes, operandOf(operand), dims, rule, mesh);
  if (!resultsFirst)
    results();
  legalizeFactorAxes(factorAxes, rule, mesh);
  return factorAxes;
}

Layout operandLayout(const ShardingRule &rule, unsigned index, ArrayRef<MeshAxes> factorAxes, Layout base) {
  for (auto [d, factors] : llvm::enumerate(rule.operands[index]))
    base.dims[d] = dimAxes(factors, factorAxes);
  return base;
}

MeshAxes dimAxes(ArrayRef<int64_t> factors, ArrayRef<MeshAxes> factorAxes) {
  MeshAxes axes;
  for (int64_t f : factors)
    axes.append(factorAxes[f].begin(), factorAxes[f].end());
  return axes;
}

SmallVector<bool> partialOperandsKept(Operation *op, bool hasRule, ArrayRef<Layout> operands) {
  int numPartial = llvm::count_if(operands, [](const Layout &l) { return !l.partial.empty(); });
  // add/sub are linear only when every operand is a partial sum alike; other ops in one operand.
  bool addLike = llvm::isa<AddOp, SubOp>(op);
  bool alike = llvm::all_of(operands, [&](const Layout &l) {
    return l.partial == operands.front().partial && l.reduction == operands.front().reduction;
  });
  bool keep = numPartial > 0 && hasRule && (addLike ? numPartial == (int)operands.size() && alike : numPartial == 1);
  SmallVector<bool> kept;
  for (auto [i, l] : llvm::enumerate(operands))
    kept.push_back(!l.partial.empty() && keep && propagatesPartial(op, i, l.reduction));
  return kept;
}

bool summedWithPartials(Operation *op, const MeshAxes &axes, llvm::function_ref<MeshAxes(Value)> partialOf) {
  if (axes.empty() || op->getNumResults() != 1)
    return false;
  for (Value v = op->getResult(0); v.hasOneUse();) {
    OpOperand &use = *v.getUses().begin();
    Operation *user = use.getOwner();
    if (llvm::isa<AddOp, SubOp>(user))
      return llvm::all_of(user->getOperands(), [&](Value o) { return o == v || partialOf(o) == axes; });
    auto cast = llvm::dyn_cast<CastOp>(user); // a narrowing cast would round the partial sums
    if (cast && cast.getType().getElementTypeBitWidth() <= llvm::cast<RankedTensorType>(v.getType()).getElementTypeBitWidth())
      return false;
    if (user->getNumResults() != 1 || !propagatesPartial(user, use.getOperandNumber(), ReductionKind::Sum) ||
        llvm::count_if(user->getOperands(), [&](Value o) { return !partialOf(o).empty() || o == v; }) != 1)
      return false;
    v = user->getResult(0);
  }
  return false;
}

void dropFactorAxes(FactorAxes &factorAxes, const MeshAxes &axes) {
  for (MeshAxes &f : factorAxes)
    llvm::erase_if(f, [&](const std::string &a) { return llvm::is_contained(axes, a); });
}

Layout resultLayout(const ShardingRule &rule, unsigned index, ArrayRef<MeshAxes> factorAxes, const Layout *passed) {
  const ShardingRule::TensorFactors &dims = rule.results[index];
  Layout l = Layout::whole(dims.size());
  for (auto [d, factors] : llvm::enumerate(dims))
    l.dims[d] = dimAxes(factors, factorAxes);
  if (passed) {
    l.partial = passed->partial;
    l.reduction = passed->reduction;
  }
  for (int64_t f = 0; f < rule.numFactors(); ++f) {
    bool inResult = llvm::any_of(dims, [&](const ShardingRule::DimFactors &d) { return llvm::is_contained(d, f); });
    if (!inResult && rule.inOperands(f) && !factorAxes[f].empty()) {
      if (l.partial.empty() || l.reduction != rule.factors[f].reduction)
        l.partial.clear();
      l.partial.append(factorAxes[f].begin(), factorAxes[f].end());
      l.reduction = rule.factors[f].reduction;
    }
  }
  return l;
}

std::string splitVariable(Operation *read, VariableOp variable, ShardingAttr sharding, RankedTensorType local,
                          VariableSplits &splits) {
  auto [earlier, first] = splits.try_emplace(variable, sharding);
  if (!first && earlier->second != sharding)
    return "another function reads it otherwise, and a variable is stored one way";
  if (!sharding)
    return "";
  if (first && variable.getShardingAttr())
    return "it is split already and cannot be split again";
  if (first) {
    OpBuilder b(variable);
    variable.setGlobalShapeAttr(b.getDenseI64ArrayAttr(variable.getTensorType().getShape()));
    variable.setShardingAttr(sharding);
    variable.setType(local);
  }
  read->getResult(0).setType(local);
  return "";
}

} // namespace cpc
