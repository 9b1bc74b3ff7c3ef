//===- KernelCoverageTest.cpp - every op a plan can hold has its kernels ------===//
//
// Walks every op the cpc dialect registers and checks that the runtime knows it as the same op
// (the generated op table, kernels/OpKind.h), can run it (a CPU kernel, and a CUDA kernel when
// the GPU backend is built, or a rank-dependent kernel of the communicator on every device, or
// an entry below saying why no kernel is needed) and can decode every attribute it declares. A
// kernel registration removed, or an op or attribute added without its runtime half, fails here,
// before a plan meets it at run time (issue 30).
//
#include "dialects/cpc/CpcDialect.h"
#include "kernels/OpAttrs.h"
#include "kernels/OpKind.h"
#include "runtime/CollectiveKernels.h"
#include "runtime/Device.h"
#include "runtime/Plan.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace cpc;

/// Ops that never reach a kernel, and why.
const std::map<OpKind, std::string> kNoKernel = {
    {OpKind::Constant, "the plan holds its value as a buffer's initial contents"},
    {OpKind::Parameter, "a read of a parameter variable, bound to its buffer by the plan builder"},
    {OpKind::State, "a read of a state variable, bound to its buffer by the plan builder"},
    {OpKind::Variable, "a symbol declaring a parameter or state: the plan builder makes its buffer"},
    {OpKind::Mesh, "a symbol naming the device mesh; no value"},
    {OpKind::Shard, "a sharding annotation that cpc-partition replaces by local shapes and collectives"},
};

/// Ops with a CPU kernel and, so far, no CUDA kernel, and why.
const std::map<OpKind, std::string> kCpuOnly = {};

/// Attributes the plan builder consumes and never writes into a step, and why (none today: an
/// assign's step keeps its variable's name, for messages).
const std::map<std::pair<OpKind, std::string>, std::string> kBuilderOnlyAttrs = {};

std::set<std::string> dialectOps() {
  mlir::MLIRContext context;
  context.loadDialect<CpcDialect>();
  std::set<std::string> ops;
  for (mlir::RegisteredOperationName op : context.getRegisteredOperations())
    if (op.getDialectNamespace() == "cpc")
      ops.insert(op.getStringRef().str());
  return ops;
}

std::set<OpKind> kernelKinds(DeviceKind device) {
  std::vector<OpKind> kinds = kernelRegistry().kinds(device);
  return {kinds.begin(), kinds.end()};
}

// Tests that the generated op table and the registered dialect hold the same ops, by name, so
// that the runtime's kinds are the dialect's ops.
TEST(KernelCoverage, OpTableIsTheDialect) {
  std::set<std::string> ops = dialectOps(), table;
  for (OpKind kind : allOpKinds()) {
    table.insert(opName(kind));
    EXPECT_EQ(findOpKind(opName(kind)), kind) << kind;
  }
  EXPECT_EQ(table, ops);
  EXPECT_FALSE(findOpKind("cpc.no_such_op"));
  EXPECT_THROW(opKindNamed("cpc.no_such_op"), std::invalid_argument);
}

// Tests that every op of the dialect has a CPU kernel (and a CUDA one where built), runs through
// the communicator's kernels, or is listed with its reason; and that no listed op has a kernel.
TEST(KernelCoverage, EveryDialectOpRunsOnEveryDevice) {
  std::set<OpKind> cpu = kernelKinds(DeviceKind::Cpu), cuda = kernelKinds(DeviceKind::Cuda);
  ASSERT_GT(allOpKinds().size(), 50u);
  int checked = 0;
  for (OpKind op : allOpKinds()) {
    if (kNoKernel.count(op)) {
      EXPECT_FALSE(cpu.count(op) || findCollectiveKernel(op)) << op << " is listed as needing no kernel but has one";
      continue;
    }
    EXPECT_EQ(hasTrait(op, PlanTrait::RankDependent), bool(findCollectiveKernel(op)))
        << op << ": the communicator runs exactly the rank-dependent ops";
    if (findCollectiveKernel(op))
      continue; // runs through the communicator, on the CPU and on GPUs
    ++checked;
    EXPECT_TRUE(cpu.count(op)) << op << " has no CPU kernel";
    if (cudaBackendBuilt() && !kCpuOnly.count(op)) {
      EXPECT_TRUE(cuda.count(op)) << op << " has no CUDA kernel";
    }
  }
  EXPECT_GT(checked, 40);
}

/// A value of the JSON form the plan builder writes for an attribute of ODS class `storage`:
/// for a defaulted one its default (an enum's by its case name), which every kernel accepts.
nlohmann::json sampleValue(const OpAttrSpec &spec) {
  std::string storage = spec.storage;
  if (spec.presence == AttrPresence::Defaulted) {
    nlohmann::json value = nlohmann::json::parse(spec.defaultValue, nullptr, /*allow_exceptions=*/false);
    return value.is_discarded() ? nlohmann::json(spec.defaultValue) : value; // a case name: "none", "sum"
  }
  if (storage == "I64Attr")
    return 1;
  if (storage == "F64Attr")
    return 0.5;
  if (storage == "BoolAttr" || storage == "UnitAttr")
    return true;
  if (storage == "DenseI64ArrayAttr")
    return std::vector<int64_t>{0};
  if (storage == "DenseF64ArrayAttr")
    return std::vector<double>{0.5};
  if (storage == "StrArrayAttr")
    return std::vector<std::string>{"dp"};
  if (storage == "StrAttr" || storage == "FlatSymbolRefAttr")
    return "dp";
  if (storage == "Cpc_ShardingAttr")
    return {{"mesh", "mesh"}, {"dim_axes", {std::vector<std::string>{"dp"}}}, {"partial", std::vector<std::string>{}}};
  ADD_FAILURE() << "no sample for attribute '" << spec.name << "' of class " << storage;
  return nullptr;
}

std::string decodeError(OpKind op, const nlohmann::json &attrs) {
  try {
    kernels::decodeOpAttrs(op, attrs);
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

// Tests that the runtime decodes every attribute each op with a kernel declares in ODS, by the
// op's own rules: all of them together decode; without a required one the step fails naming
// it; a defaulted or optional one may be left out; a name the op lacks is refused.
TEST(KernelCoverage, EveryAttributeDecodes) {
  int decoded = 0;
  for (OpKind op : allOpKinds()) {
    if (kNoKernel.count(op))
      continue;
    nlohmann::json all = nlohmann::json::object();
    for (const OpAttrSpec &spec : opAttrSpecs(op))
      if (!kBuilderOnlyAttrs.count({op, spec.name}))
        all[spec.name] = sampleValue(spec);
    EXPECT_EQ(decodeError(op, all), "") << op << " " << all.dump();
    for (const OpAttrSpec &spec : opAttrSpecs(op)) {
      if (kBuilderOnlyAttrs.count({op, spec.name}))
        continue;
      EXPECT_EQ(spec.presence == AttrPresence::Defaulted, std::string(spec.defaultValue) != "") << op << " " << spec.name;
      nlohmann::json without = all;
      without.erase(spec.name);
      std::string error = decodeError(op, without);
      if (spec.presence == AttrPresence::Required)
        EXPECT_NE(error.find("missing attribute '" + std::string(spec.name) + "'"), std::string::npos) << op << ": " << error;
      else
        EXPECT_EQ(error, "") << op << " without " << spec.name;
      ++decoded;
    }
    nlohmann::json extra = all;
    extra["no_such_attribute"] = 1;
    EXPECT_NE(decodeError(op, extra).find("unknown attribute 'no_such_attribute'"), std::string::npos) << op;
  }
  EXPECT_GT(decoded, 80);
  const std::vector<OpAttrSpec> &groups = opAttrSpecs(OpKind::Conv2D);
  auto it = std::find_if(groups.begin(), groups.end(), [](const OpAttrSpec &s) { return std::string(s.name) == "groups"; });
  ASSERT_NE(it, groups.end());
  EXPECT_STREQ(it->defaultValue, "1");
  EXPECT_STREQ(it->storage, "I64Attr");
  EXPECT_EQ(kernels::decodeOpAttrs(OpKind::Conv2D, {{"strides", {1, 1}}, {"padding", {0, 0, 0, 0}}, {"dilations", {1, 1}}}).groups, 1);
}

// Tests that the lists above name only ops with the property they excuse, so that they shrink.
TEST(KernelCoverage, ListsStayNeeded) {
  for (const auto &[op, why] : kCpuOnly)
    EXPECT_FALSE(kernelKinds(DeviceKind::Cuda).count(op)) << op << " (" << why << ") has a CUDA kernel now";
  for (const auto &[key, why] : kBuilderOnlyAttrs) {
    const std::vector<OpAttrSpec> &specs = opAttrSpecs(key.first);
    EXPECT_TRUE(std::any_of(specs.begin(), specs.end(), [&](const OpAttrSpec &s) { return key.second == s.name; }))
        << key.first << " has no attribute " << key.second << " (" << why << ")";
  }
}

// Tests the plan traits the runtime reads against the dialect's (op->hasTrait in the compiler).
TEST(KernelCoverage, PlanTraitsMatchTheDialect) {
  mlir::MLIRContext context;
  context.loadDialect<CpcDialect>();
  for (OpKind op : allOpKinds()) {
    std::optional<mlir::RegisteredOperationName> name = mlir::RegisteredOperationName::lookup(opName(op), &context);
    ASSERT_TRUE(name) << op;
    EXPECT_EQ(name->hasTrait<OpTrait::GroupCollective>(), hasTrait(op, PlanTrait::GroupCollective)) << op;
    EXPECT_EQ(name->hasTrait<OpTrait::CombiningCollective>(), hasTrait(op, PlanTrait::CombiningCollective)) << op;
    EXPECT_EQ(name->hasTrait<OpTrait::PointToPoint>(), hasTrait(op, PlanTrait::PointToPoint)) << op;
    EXPECT_EQ(name->hasTrait<OpTrait::RankDependent>(), hasTrait(op, PlanTrait::RankDependent)) << op;
    EXPECT_EQ(name->hasTrait<OpTrait::MayRunInPlace>(), hasTrait(op, PlanTrait::MayRunInPlace)) << op;
  }
  EXPECT_TRUE(hasTrait(OpKind::AllReduce, PlanTrait::GroupCollective));
  EXPECT_TRUE(hasTrait(OpKind::Send, PlanTrait::PointToPoint));
  EXPECT_FALSE(communicates(OpKind::ShardSlice));
  EXPECT_TRUE(hasTrait(OpKind::ShardSlice, PlanTrait::RankDependent));
  EXPECT_FALSE(hasTrait(OpKind::Add, PlanTrait::GroupCollective));
}

// Tests that the plan's roles and the attributes' enums are the dialect's (generated from the
// same ODS enums): each case keeps its value and name across the bridge (PlanBuilder's planRole).
TEST(KernelCoverage, RolesMatchTheDialect) {
  for (uint32_t v = 0; v <= getMaxEnumValForStateRole(); ++v)
    EXPECT_EQ(roleName(planRole<VariableRole>(StateRole(v))), stringifyStateRole(StateRole(v)).str());
  for (uint32_t v = 0; v <= getMaxEnumValForPhase(); ++v)
    EXPECT_EQ(roleName(planRole<ProgramPhase>(Phase(v))), stringifyPhase(Phase(v)).str());
  for (uint32_t v = 0; v <= getMaxEnumValForRuntimeInput(); ++v)
    EXPECT_EQ(roleName(planRole<RuntimeInputKind>(RuntimeInput(v))), stringifyRuntimeInput(RuntimeInput(v)).str());
  EXPECT_EQ(std::string(roleName(VariableRole::None)), "");
  EXPECT_EQ(parseRole<VariableRole>("exp_avg_sq"), VariableRole::ExpAvgSq);
  EXPECT_EQ(std::string(roleName(VariableRole(getMaxEnumValForStateRole() + 2))), "?");
  for (uint32_t v = 0; v <= getMaxEnumValForReductionKind(); ++v) {
    nlohmann::json attrs = {{"mesh", "mesh"}, {"mesh_axes", {"dp"}}, {"kind", stringifyReductionKind(ReductionKind(v)).str()}};
    EXPECT_EQ(uint32_t(kernels::decodeOpAttrs(OpKind::AllReduce, attrs).kind), v);
  }
  for (uint32_t v = 0; v <= getMaxEnumValForGeluApproximation(); ++v)
    EXPECT_EQ(kernels::attrEnumName(kernels::GeluApproximation(v)), stringifyGeluApproximation(GeluApproximation(v)).str());
  for (uint32_t v = 0; v <= getMaxEnumValForAttentionLayout(); ++v)
    EXPECT_EQ(kernels::attrEnumName(kernels::AttentionLayout(v)), stringifyAttentionLayout(AttentionLayout(v)).str());
  for (uint32_t v = 0; v <= getMaxEnumValForScatterReduction(); ++v)
    EXPECT_EQ(kernels::attrEnumName(kernels::ScatterReduction(v)), stringifyScatterReduction(ScatterReduction(v)).str());
}

} // namespace
