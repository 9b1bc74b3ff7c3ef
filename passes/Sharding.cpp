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
  return l;
}

ShardingAttr Layout::toAttr(FlatSymbolRefAttr mesh) const {
  Builder b(mesh.getContext());
  SmallVector<Attribute> dimAttrs;
  for (const MeshAxes &axes : dims)
    dimAttrs.push_back(b.getStrArrayAttr(SmallVector<StringRef>(axes.begin(), axes.end())));
  ArrayAttr partialAttr;
  if (!partial.empty())
    partialAttr = b.getStrArrayAttr(SmallVector<StringRef>(partial.begin(), partial.end()));
  return ShardingAttr::get(mesh.getContext(), mesh, b.getArrayAttr(dimAttrs), partialAttr);
}

std::string Layout::describe() const {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    s += d ? ", " : "";
    s += dims[d].empty() ? "-" : llvm::join(dims[d], "*");
  }
  s += "]";
  if (!partial.empty())
    s += " partial(" + llvm::join(partial, ",") + ")";
  return s;
}

FlatSymbolRefAttr Mesh::ref() const { return FlatSymbolRefAttr::get(op_.getContext(), op_.getSymName()); }

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
    if (type.getDimSize(d) % mesh.parts(l.dims[d]))
      return where->emitError("dim ") << d << " of size " << type.getDimSize(d) << " does not split into "
                                      << mesh.parts(l.dims[d]) << " blocks";
  }
  if (failed(known(l.partial)))
    return failure();
  return l;
}

void collectFactorAxes(MutableArrayRef<MeshAxes> factorAxes, const Layout &l, ArrayRef<int64_t> factors) {
  // A mesh axis splits one factor of an op at most: a second would split one value's dims
  // twice over it (e.g. x + transpose(x) with x split on dim 0), so that factor stays whole.
  auto taken = [&](const MeshAxes &axes) {
    return llvm::any_of(factorAxes, [&](const MeshAxes &other) {
      return llvm::any_of(axes, [&](const std::string &a) { return llvm::is_contained(other, a); });
    });
  };
  for (auto [d, f] : llvm::enumerate(factors))
    if (f >= 0 && factorAxes[f].empty() && !l.dims[d].empty() && !taken(l.dims[d]))
      factorAxes[f] = l.dims[d];
}

SmallVector<SmallVector<int64_t>> factorDimSizes(const ShardingRule &rule, Operation *op) {
  SmallVector<SmallVector<int64_t>> sizes(rule.numFactors());
  auto note = [&](Value v, ArrayRef<int64_t> factors) {
    ArrayRef<int64_t> shape = llvm::cast<RankedTensorType>(v.getType()).getShape();
    for (auto [d, f] : llvm::enumerate(factors))
      if (f >= 0)
        sizes[f].push_back(shape[d]);
  };
  for (auto [v, factors] : llvm::zip(op->getOperands(), rule.operands))
    note(v, factors);
  for (auto [v, factors] : llvm::zip(op->getResults(), rule.results))
    note(v, factors);
  return sizes;
}

void dropIndivisibleFactors(MutableArrayRef<MeshAxes> factorAxes, ArrayRef<SmallVector<int64_t>> sizes,
                            const Mesh &mesh) {
  for (auto [axes, dimSizes] : llvm::zip(factorAxes, sizes))
    if (llvm::any_of(dimSizes, [&](int64_t n) { return n % mesh.parts(axes); }))
      axes.clear();
}

SmallVector<bool> partialOperandsKept(Operation *op, bool hasRule, ArrayRef<bool> partialIn) {
  int numPartial = llvm::count(partialIn, true);
  // add/sub are linear only when every operand is a partial sum alike; other ops in one operand.
  bool addLike = llvm::isa<AddOp, SubOp>(op);
  bool keep = numPartial > 0 && hasRule && (addLike ? numPartial == (int)partialIn.size() : numPartial == 1);
  SmallVector<bool> kept;
  for (auto [i, partial] : llvm::enumerate(partialIn))
    kept.push_back(partial && keep && propagatesPartialSums(op, i));
  return kept;
}

Layout resultLayout(const ShardingRule &rule, unsigned index, RankedTensorType type, ArrayRef<MeshAxes> factorAxes,
                    ArrayRef<std::string> passedPartial, const Mesh &mesh) {
  ArrayRef<int64_t> factors = rule.results[index];
  Layout l = Layout::whole(type.getRank());
  for (auto [d, f] : llvm::enumerate(factors))
    if (f >= 0 && type.getDimSize(d) % mesh.parts(factorAxes[f]) == 0)
      l.dims[d] = factorAxes[f];
  l.partial.assign(passedPartial.begin(), passedPartial.end());
  for (int64_t f = 0; f < rule.numFactors(); ++f) {
    bool inOperands = llvm::any_of(rule.operands, [&](const auto &dims) { return llvm::is_contained(dims, f); });
    if (inOperands && !llvm::is_contained(factors, f) && !factorAxes[f].empty())
      l.partial = factorAxes[f];
  }
  return l;
}

} // namespace cpc
