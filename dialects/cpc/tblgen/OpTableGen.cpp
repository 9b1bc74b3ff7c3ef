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
//   CPC_ATTR(field, "name", CppType)       each attribute name the ops declare, once, with the
//                                           C++ type the runtime decodes it into (field is the
//                                           name in camelCase); one name has one type
//   CPC_OP_ATTR(Kind, field, "name", Storage, Presence, "default")
//                                           each attribute an op declares, in ODS order:
//                                           Storage is the ODS attribute class (I64Attr, ...),
//                                           Presence Required, Optional or Defaulted, and the
//                                           default is ODS's literal (an enum's case by name;
//                                           "" without one)
//   CPC_OP_ATTR_DEFAULT(Kind, field, value)  each defaulted attribute's default as a C++
//                                           expression of the field's type
//   CPC_ENUM_ATTR(AttrClass, Enum)         each enum attribute of the dialect (for code that
//                                           links MLIR: the plan builder writes their cases)
//   CPC_GEN_ATTR_ENUMS                      (a section, not a macro) the enums attributes are
//                                           stored as, declared as `enum class E : uint8_t`,
//                                           with `AttrEnumCases<E>::names` (a template the
//                                           includer declares)
//
// Attributes whose class has no plan form (ElementsAttr: a constant's value lives in a buffer;
// TypeAttr: a variable's type is its buffer's; arrays of attributes such as a mesh's axis roles)
// are left out of the attribute macros.
//
// A user defines the macros it needs before including the generated file; the others expand to
// nothing. The file is #include-d several times, so it has no include guard.
//
#include "mlir/TableGen/AttrOrTypeDef.h"
#include "mlir/TableGen/Dialect.h"
#include "mlir/TableGen/GenInfo.h"
#include "mlir/TableGen/Operator.h"
#include "mlir/TableGen/Trait.h"
#include "mlir/Tools/mlir-tblgen/MlirTblgenMain.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/TableGen/Error.h"
#include "llvm/TableGen/Record.h"

#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
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

/// The enum an attribute is stored as (an EnumAttr of the dialect), if it is one.
std::optional<mlir::tblgen::EnumAttr> storedEnum(const mlir::tblgen::Attribute &attr) {
  const Record &def = attr.getBaseAttr().getDef();
  if (!def.isSubClassOf("EnumAttr"))
    return std::nullopt;
  return mlir::tblgen::EnumAttr(def.getValueAsDef("enum"));
}

/// The C++ type the runtime decodes an attribute into; "" for a class with no plan form.
std::string runtimeType(const mlir::tblgen::Attribute &attr) {
  if (std::optional<mlir::tblgen::EnumAttr> info = storedEnum(attr))
    return info->getEnumClassName().str();
  if (attr.getBaseAttr().getDef().isSubClassOf("TypeAttrBase"))
    return ""; // a variable's type: the plan's buffer has it
  static const std::map<std::string, std::string> types = {
      {"I64Attr", "int64_t"},
      {"F64Attr", "double"},
      {"BoolAttr", "bool"},
      {"UnitAttr", "bool"},
      {"DenseI64ArrayAttr", "std::vector<int64_t>"},
      {"DenseF64ArrayAttr", "std::vector<double>"},
      {"StrArrayAttr", "std::vector<std::string>"},
      {"StrAttr", "std::string"},
      {"FlatSymbolRefAttr", "std::string"},
      {"SymbolNameAttr", "std::string"},
      {"Cpc_ShardingAttr", "nlohmann::json"}, // decoded by the kernel that reads it
      {"ElementsAttr", ""},
  };
  auto it = types.find(storageClass(attr));
  if (it == types.end() && attr.getBaseAttr().getDef().isSubClassOf("TypedArrayAttrBase") &&
      attr.getBaseAttr().getDef().getValueAsDef("elementAttr")->isSubClassOf("EnumAttr"))
    return ""; // an array of enums (a mesh's axis roles): the compiler's; the plan keeps the mesh's shape and names
  if (it == types.end())
    llvm::PrintFatalError("cpc-tblgen: no runtime type for attribute class " + storageClass(attr) +
                          " (add it to runtimeType)");
  return it->second;
}

/// snake_case -> camelCase: the field an attribute is decoded into (transpose_lhs -> transposeLhs).
std::string fieldName(StringRef name) {
  std::string out;
  bool upper = false;
  for (char c : name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? char(std::toupper(c)) : c;
    upper = false;
  }
  return out;
}

/// An enum attribute's default, the case ODS names in C++ (::cpc::E::Case): its string ("none")
/// and its runtime expression (E::Case).
std::pair<std::string, std::string> defaultCase(const mlir::tblgen::EnumAttr &info, StringRef literal) {
  StringRef symbol = literal.rsplit("::").second;
  for (const mlir::tblgen::EnumAttrCase &c : info.getAllCases())
    if (c.getSymbol() == symbol)
      return {c.getStr().str(), (info.getEnumClassName() + "::" + symbol).str()};
  llvm::PrintFatalError("cpc-tblgen: default " + literal + " is no case of " + info.getEnumClassName());
}

/// One CPC_ATTR per attribute name; a name declared with two runtime types is an error, since
/// the runtime keeps one field per name.
bool emitAttributeFields(const std::vector<mlir::tblgen::Operator> &ops, llvm::raw_ostream &os) {
  std::map<std::string, std::pair<std::string, std::string>> fields; // name -> (type, first op)
  std::vector<std::string> order;
  for (const mlir::tblgen::Operator &op : ops)
    for (const mlir::tblgen::NamedAttribute &named : op.getAttributes()) {
      std::string type = named.attr.isDerivedAttr() ? "" : runtimeType(named.attr);
      if (type.empty())
        continue;
      auto [it, added] = fields.insert({named.name.str(), {type, op.getOperationName()}});
      if (added)
        order.push_back(named.name.str());
      else if (it->second.first != type) {
        llvm::PrintError(op.getLoc().front(), "cpc-tblgen: attribute '" + named.name + "' of " + op.getOperationName() +
                                                  " is " + type + ", but " + it->second.second + "'s is " +
                                                  it->second.first + ": rename one (the runtime keeps one field per name)");
        return true;
      }
    }
  os << "#ifdef CPC_ATTR\n";
  for (const std::string &name : order)
    os << llvm::formatv("CPC_ATTR({0}, {1}, {2})\n", fieldName(name), quoted(name), fields[name].first);
  os << "#undef CPC_ATTR\n#endif\n\n";
  return false;
}

/// The enums attributes are stored as, declared for the runtime (which does not link MLIR).
void emitAttributeEnums(const std::vector<mlir::tblgen::Operator> &ops, llvm::raw_ostream &os) {
  os << "#ifdef CPC_GEN_ATTR_ENUMS\n#undef CPC_GEN_ATTR_ENUMS\n";
  std::set<std::string> seen;
  for (const mlir::tblgen::Operator &op : ops)
    for (const mlir::tblgen::NamedAttribute &named : op.getAttributes()) {
      std::optional<mlir::tblgen::EnumAttr> info = named.attr.isDerivedAttr() ? std::nullopt : storedEnum(named.attr);
      if (!info || !seen.insert(info->getEnumClassName().str()).second)
        continue;
      std::string cases, names;
      for (const mlir::tblgen::EnumAttrCase &c : info->getAllCases()) {
        cases += (cases.empty() ? "" : ", ") + c.getSymbol().str();
        names += (names.empty() ? "" : ", ") + quoted(c.getStr());
      }
      os << llvm::formatv("/// {0}\nenum class {1} : uint8_t { {2} };\n", info->getSummary(), info->getEnumClassName(), cases);
      os << llvm::formatv("template <> struct AttrEnumCases<{0}> {\n"
                          "  static constexpr const char *names[] = { {1} };\n};\n",
                          info->getEnumClassName(), names);
    }
  os << "#endif\n\n";
}

void emitEnumAttrClasses(const RecordKeeper &records, llvm::raw_ostream &os) {
  os << "#ifdef CPC_ENUM_ATTR\n";
  for (const Record *def : records.getAllDerivedDefinitionsIfDefined("EnumAttr")) {
    mlir::tblgen::AttrDef attr(def);
    if (attr.getDialect().getName() == kDialect)
      os << llvm::formatv("CPC_ENUM_ATTR({0}, {1})\n", attr.getCppClassName(),
                          mlir::tblgen::EnumAttr(def->getValueAsDef("enum")).getEnumClassName());
  }
  os << "#undef CPC_ENUM_ATTR\n#endif\n\n";
}

void emitAttributes(const std::vector<mlir::tblgen::Operator> &ops, llvm::raw_ostream &os) {
  std::string rows, defaults;
  llvm::raw_string_ostream rowsOs(rows), defaultsOs(defaults);
  for (const mlir::tblgen::Operator &op : ops)
    for (const mlir::tblgen::NamedAttribute &named : op.getAttributes()) {
      if (named.attr.isDerivedAttr() || runtimeType(named.attr).empty())
        continue;
      const char *presence = named.attr.hasDefaultValue() ? "Defaulted" : named.attr.isOptional() ? "Optional" : "Required";
      std::string literal = named.attr.hasDefaultValue() ? named.attr.getDefaultValue().str() : "", cpp = literal;
      if (std::optional<mlir::tblgen::EnumAttr> info = storedEnum(named.attr); info && !literal.empty()) {
        std::tie(literal, cpp) = defaultCase(*info, literal);
      }
      std::string field = fieldName(named.name);
      rowsOs << llvm::formatv("CPC_OP_ATTR({0}, {1}, {2}, {3}, {4}, {5})\n", kindName(op), field, quoted(named.name),
                              storageClass(named.attr), presence, quoted(literal));
      if (named.attr.hasDefaultValue())
        defaultsOs << llvm::formatv("CPC_OP_ATTR_DEFAULT({0}, {1}, {2})\n", kindName(op), field, cpp);
    }
  os << "#ifdef CPC_OP_ATTR\n" << rows << "#undef CPC_OP_ATTR\n#endif\n\n";
  os << "#ifdef CPC_OP_ATTR_DEFAULT\n" << defaults << "#undef CPC_OP_ATTR_DEFAULT\n#endif\n";
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
  if (emitAttributeFields(ops, os))
    return true;
  emitAttributeEnums(ops, os);
  emitEnumAttrClasses(records, os);
  emitAttributes(ops, os);
  return false;
}

mlir::GenRegistration genOpTable("gen-cpc-op-table", "the cpc op table (kinds, traits, attributes) as X-macros",
                                 emitOpTable);

} // namespace

int main(int argc, char **argv) { return mlir::MlirTblgenMain(argc, argv); }
