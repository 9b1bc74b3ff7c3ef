//===- OpTableGen.cpp - cpc-tblgen: the cpc op table for code without MLIR ===//
//
// The runtime and the kernels do not link MLIR, yet they must know the dialect's ops: which op a
// plan step runs, what a collective is, which attributes an op has. `-gen-cpc-op-table` writes
// that knowledge from the ODS definitions (CpcOps.td) as X-macros, so that it exists once:
//
//   CPC_OP_TRAIT(Trait)                     each trait derived from Cpc_PlanTrait
//   CPC_OP(Kind, "cpc.name", traits)        each op; traits is 0 or CPC_TRAIT_BIT(T) | ...
//   CPC_ENUM_<Enum>(Case, "name")          each case of each cpc enum (EnumAttrInfo in the
//                                           ::cpc namespace), in value order 0, 1, ...
//   CPC_OP_ATTR(Kind, "name", Storage, Presence, "default")
//                                           each attribute an op declares, in ODS order:
//                                           Storage is the ODS attribute class (I64Attr, ...),
//                                           Presence Required, Optional or Defaulted, and the
//                                           default is ODS's C++ literal ("" without one)
//
// A user defines the macros it needs before including the generated file; the others expand to
// nothing. The file is #include-d several times, so it has no include guard.
//
#include "mlir/TableGen/GenInfo.h"
#include "mlir/TableGen/Operator.h"
#include "mlir/TableGen/Trait.h"
#include "mlir/Tools/mlir-tblgen/MlirTblgenMain.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"

#include <string>
#include <vector>

namespace {

using llvm::Record;
using llvm::RecordKeeper;
using llvm::StringRef;

constexpr StringRef kDialect = "cpc";
constexpr StringRef kPlanTraitClass = "Cpc_PlanTrait";

/// The op's kind in C++: its class name without the "Op" suffix (AllReduceOp -> AllReduce).
std::string kindName(const mlir::tblgen::Operator &op) {
  StringRef name = op.getCppClassName();
  name.consume_back("Op");
  return name.str();
}

/// The trait's enumerator: the record name without the dialect prefix (Cpc_GroupCollective ->
/// GroupCollective).
std::string traitName(const Record &trait) {
  StringRef name = trait.getName();
  name.consume_front("Cpc_");
  return name.str();
}

std::string quoted(StringRef s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

/// The dialect's ops, in definition order.
std::vector<mlir::tblgen::Operator> dialectOps(const RecordKeeper &records) {
  std::vector<mlir::tblgen::Operator> ops;
  for (const Record *def : records.getAllDerivedDefinitionsIfDefined("Op")) {
    mlir::tblgen::Operator op(def);
    if (op.getDialectName() == kDialect)
      ops.push_back(op);
  }
  return ops;
}

std::string traitBits(const mlir::tblgen::Operator &op) {
  std::string bits;
  for (const mlir::tblgen::Trait &trait : op.getTraits())
    if (trait.getDef().isSubClassOf(kPlanTraitClass))
      bits += (bits.empty() ? "" : " | ") + ("CPC_TRAIT_BIT(" + traitName(trait.getDef()) + ")");
  return bits.empty() ? "0" : bits;
}

void emitTraits(const RecordKeeper &records, llvm::raw_ostream &os) {
  os << "#ifdef CPC_OP_TRAIT\n";
  for (const Record *trait : records.getAllDerivedDefinitionsIfDefined(kPlanTraitClass))
    os << "CPC_OP_TRAIT(" << traitName(*trait) << ")\n";
  os << "#undef CPC_OP_TRAIT\n#endif\n\n";
}

void emitOps(const std::vector<mlir::tblgen::Operator> &ops, llvm::raw_ostream &os) {
  os << "#ifdef CPC_OP\n";
  for (const mlir::tblgen::Operator &op : ops)
    os << llvm::formatv("CPC_OP({0}, {1}, {2})\n", kindName(op), quoted(op.getOperationName()), traitBits(op));
  os << "#undef CPC_OP\n#endif\n\n";
}

/// The ODS class an attribute is stored as, seen through OptionalAttr / DefaultValuedAttr.
std::string storageClass(const mlir::tblgen::Attribute &attr) { return attr.getBaseAttr().getDefName().str(); }

void emitAttributes(const std::vector<mlir::tblgen::Operator> &ops, llvm::raw_ostream &os) {
  os << "#ifdef CPC_OP_ATTR\n";
  for (const mlir::tblgen::Operator &op : ops)
    for (const mlir::tblgen::NamedAttribute &named : op.getAttributes()) {
      if (named.attr.isDerivedAttr())
        continue;
      const char *presence = named.attr.hasDefaultValue() ? "Defaulted" : named.attr.isOptional() ? "Optional" : "Required";
      StringRef value = named.attr.hasDefaultValue() ? named.attr.getDefaultValue() : StringRef();
      os << llvm::formatv("CPC_OP_ATTR({0}, {1}, {2}, {3}, {4})\n", kindName(op), quoted(named.name),
                          storageClass(named.attr), presence, quoted(value));
    }
  os << "#undef CPC_OP_ATTR\n#endif\n";
}

/// The dialect's enums (roles, phases, reductions): the runtime's own enums are built from their
/// cases, so the cases' values must be 0, 1, ... in order (a conversion is then an offset).
bool emitEnums(const RecordKeeper &records, llvm::raw_ostream &os) {
  for (const Record *def : records.getAllDerivedDefinitionsIfDefined("EnumAttrInfo")) {
    mlir::tblgen::EnumAttr info(def);
    if (info.getCppNamespace() != "::cpc")
      continue;
    std::string macro = ("CPC_ENUM_" + info.getEnumClassName()).str();
    os << "#ifdef " << macro << "\n";
    int64_t expected = 0;
    for (const mlir::tblgen::EnumAttrCase &c : info.getAllCases()) {
      if (c.getValue() != expected++) {
        llvm::PrintError(def, "cpc-tblgen: the cases of " + info.getEnumClassName() + " must be numbered 0, 1, ... in order");
        return true;
      }
      os << llvm::formatv("{0}({1}, {2})\n", macro, c.getSymbol(), quoted(c.getStr()));
    }
    os << "#undef " << macro << "\n#endif\n\n";
  }
  return false;
}

bool emitOpTable(const RecordKeeper &records, llvm::raw_ostream &os) {
  std::vector<mlir::tblgen::Operator> ops = dialectOps(records);
  if (ops.empty()) {
    llvm::PrintError("no op of the '" + kDialect + "' dialect in the input");
    return true;
  }
  os << "// The cpc op table, generated by cpc-tblgen -gen-cpc-op-table from the ODS definitions.\n"
        "// Do not edit. See dialects/cpc/tblgen/OpTableGen.cpp for the macros.\n\n";
  emitTraits(records, os);
  if (emitEnums(records, os))
    return true;
  emitOps(ops, os);
  emitAttributes(ops, os);
  return false;
}

mlir::GenRegistration genOpTable("gen-cpc-op-table", "the cpc op table (kinds, traits, attributes) as X-macros",
                                 emitOpTable);

} // namespace

int main(int argc, char **argv) { return mlir::MlirTblgenMain(argc, argv); }
