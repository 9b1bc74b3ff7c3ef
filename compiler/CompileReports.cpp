//===- CompileReports.cpp - what cpc compile prints about a plan -----------===//
#include "compiler/CompileReports.h"
#include "dialects/cpc/CpcDialect.h"
#include "dialects/cpc/Roles.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <iomanip>
#include <set>

namespace cpc {

namespace {

std::string typeString(mlir::Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// Global shape of a local value laid out as `sharding` on `mesh`.
std::string globalShape(mlir::RankedTensorType local, ShardingAttr sharding, MeshOp mesh) {
  std::string s = "[";
  for (int64_t d = 0; d < local.getRank(); ++d) {
    int64_t parts = 1;
    for (llvm::StringRef axis : sharding.getAxesOfDim(d))
      parts *= mesh.getAxisSize(axis);
    s += (d ? "x" : "") + std::to_string(local.getDimSize(d) * parts);
  }
  return s + "]";
}

std::string shardingString(ShardingAttr sharding) {
  std::string s = "[";
  for (unsigned d = 0; d < sharding.getDimAxes().size(); ++d) {
    auto axes = sharding.getAxesOfDim(d);
    s += d ? ", " : "";
    s += axes.empty() ? "-" : llvm::join(axes, "*");
  }
  s += "]";
  auto partial = sharding.getPartialAxisNames();
  if (!partial.empty())
    s += " partial(" + llvm::join(partial, ",") + ")";
  return s;
}

} // namespace

/// What the sharding search of `func` (named `name`) chose among and predicts, and its reshards.
static void printSearchSummary(mlir::func::FuncOp func, const std::string &name, std::ostream &out) {
  auto search = func->getAttrOfType<mlir::DictionaryAttr>("cpc.sharding_search");
  if (!search)
    return;
  auto i64 = [&](llvm::StringRef key) {
    auto a = search.getAs<mlir::IntegerAttr>(key);
    return a ? a.getInt() : 0;
  };
  auto optimal = search.getAs<mlir::BoolAttr>("optimal");
  out << "  " << name << ": layout over " << search.getAs<mlir::StringAttr>("axis").getValue().str()
      << " by search: " << i64("nodes") << " ops and variables (" << i64("tied") << " tied to a repeat), "
      << i64("strategies") << " strategies, " << i64("program_variables") << " program variables, "
      << (optimal && optimal.getValue() ? "optimal" : "not proven optimal") << "; predicts " << i64("collectives")
      << " collectives, " << i64("bytes") << " B sent per rank and run, " << i64("variable_bytes")
      << " B of variables (parameters" << (getPhase(func) == Phase::Infer ? "" : " and optimizer states")
      << ") per rank\n";
  if (auto reshards = search.getAs<mlir::ArrayAttr>("reshards"))
    for (mlir::Attribute line : reshards)
      out << "    reshard at " << llvm::cast<mlir::StringAttr>(line).getValue().str() << "\n";
  // Per variable: the layout chosen and what each other one would change (AutoSharding.cpp).
  if (auto variables = search.getAs<mlir::ArrayAttr>("variables"))
    for (mlir::Attribute line : variables)
      out << "    variable " << llvm::cast<mlir::StringAttr>(line).getValue().str() << "\n";
}

/// The --dump-sharding table: every input, variable and op result that is split or partial.
void printShardingTable(mlir::ModuleOp module, const std::vector<std::string> &functions, std::ostream &out,
                        bool variablesOnly) {
  auto mesh = module.lookupSymbol<MeshOp>("mesh");
  if (mesh) {
    out << "sharding over mesh @" << mesh.getSymName().str() << " (";
    for (auto [i, size] : llvm::enumerate(mesh.getShape()))
      out << (i ? " x " : "") << llvm::cast<mlir::StringAttr>(mesh.getAxisNames()[i]).getValue().str() << "="
                << size;
    out << ")\n";
  } else {
    out << "sharding:\n";
    out << "  one rank: every value is whole\n";
    return;
  }
  auto row = [&](const std::string &fn, const std::string &value, const std::string &global, const std::string &sh,
                const std::string &local) {
    out << "  " << std::left << std::setw(12) << fn << std::setw(52) << value.substr(0, 51) << std::setw(18)
              << global << std::setw(22) << sh << local << "\n";
  };
  row("function", "value", "global shape", "sharding", "local shape");
  for (const std::string &name : functions) {
    auto func = module.lookupSymbol<mlir::func::FuncOp>(name);
    if (!func)
      continue;
    for (auto arg : func.getArguments()) {
      auto sharding = func.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(), "cpc.sharding");
      auto argName = func.getArgAttrOfType<mlir::StringAttr>(arg.getArgNumber(), "cpc.name");
      if (!sharding)
        continue;
      auto t = llvm::cast<mlir::RankedTensorType>(arg.getType());
      row(name, "input " + (argName ? argName.getValue().str() : std::string("?")), globalShape(t, sharding, mesh),
          shardingString(sharding), typeString(t));
    }
    printSearchSummary(func, name, out);
    std::set<std::string> variablesShown; // a variable may be read at several places
    func.walk([&](mlir::Operation *op) {
      auto shardings = op->getAttrOfType<mlir::ArrayAttr>("cpc.shardings");
      // Variables stored split (tensor parallelism) carry their layout as `sharding`.
      ShardingAttr stored;
      if (auto param = llvm::dyn_cast<ParameterOp>(op))
        stored = param.getShardingAttr();
      else if (auto state = llvm::dyn_cast<StateOp>(op))
        stored = state.getShardingAttr();
      if (!shardings && stored)
        shardings = mlir::ArrayAttr::get(op->getContext(), {stored});
      if (!shardings || (variablesOnly && !llvm::isa<ParameterOp, StateOp>(op)))
        return;
      std::string label = op->getName().getStringRef().str();
      if (auto nameLoc = llvm::dyn_cast<mlir::NameLoc>(op->getLoc()))
        label += " " + nameLoc.getName().str();
      // Stored blocks of parameters and optimizer states (tensor parallelism, ZeRO).
      if (auto param = llvm::dyn_cast<ParameterOp>(op))
        label = "param " + param.getName().str();
      else if (auto state = llvm::dyn_cast<StateOp>(op))
        label = "state " + state.getName().str();
      if (llvm::isa<ParameterOp, StateOp>(op) && !variablesShown.insert(label).second)
        return;
      for (auto [i, attr] : llvm::enumerate(shardings)) {
        auto sharding = llvm::cast<ShardingAttr>(attr);
        auto t = llvm::cast<mlir::RankedTensorType>(op->getResult(i).getType());
        row(name, label, globalShape(t, sharding, mesh),
            shardingString(sharding), typeString(t));
      }
    });
  }
}

/// The stage table: per chunk its pipeline rank, ops, estimated FLOPs, parameter and boundary bytes.
void printStageTable(mlir::ModuleOp module, const PipelineSchedule &schedule, std::ostream &out) {
  auto table = module->getAttrOfType<mlir::ArrayAttr>("cpc.pipeline_chunks");
  if (!table)
    return;
  out << "pipeline: " << schedule.stages << " stages x " << schedule.virtualStages << " chunks, "
            << schedule.microbatches << " microbatches, " << scheduleName(schedule.kind) << ", bubble "
            << std::fixed << std::setprecision(3) << schedule.bubbleFraction() << std::defaultfloat << "\n";
  auto first = table.empty() ? mlir::DictionaryAttr() : llvm::cast<mlir::DictionaryAttr>(table[0]);
  auto withBackward = first ? first.getAs<mlir::BoolAttr>("with_backward") : mlir::BoolAttr();
  out << "  chunk  rank     ops    fwd GFLOP  " << (withBackward && withBackward.getValue() ? "est. f+b ms" : "est. fwd ms")
      << "   param bytes  in bytes  first op\n";
  for (mlir::Attribute a : table) {
    auto d = llvm::cast<mlir::DictionaryAttr>(a);
    auto get = [&](const char *k) { return llvm::cast<mlir::IntegerAttr>(d.get(k)).getInt(); };
    double flops = llvm::cast<mlir::FloatAttr>(d.get("flops")).getValueAsDouble();
    double seconds = llvm::cast<mlir::FloatAttr>(d.get("seconds")).getValueAsDouble();
    out << "  " << std::setw(5) << get("chunk") << std::setw(6) << get("chunk") % schedule.stages
              << std::setw(8) << get("ops") << std::setw(13) << std::setprecision(4) << flops / 1e9
              << std::setw(14) << std::setprecision(4) << seconds * 1e3 << std::setw(14) << get("parameter_bytes") << std::setw(10) << get("boundary_bytes") << "  "
              << llvm::cast<mlir::StringAttr>(d.get("first_op")).getValue().str() << "\n";
  }
}

} // namespace cpc
