//===- OpKind.h - the cpc ops as the runtime and the kernels know them ----===//
//
// One identity per op: the kinds, their names and their plan traits are generated from the ODS
// definitions (dialects/cpc/CpcOps.td, by cpc-tblgen into CpcOpTable.h.inc), so that a kernel
// registers for an OpKind and "is this a collective" is a trait of the op, not a list of names.
// A plan names its steps' ops ("add" in the dialect's namespace); the plan loader turns each name into its kind once.
//
#ifndef CPC_KERNELS_OPKIND_H
#define CPC_KERNELS_OPKIND_H

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string_view>
#include <vector>

namespace cpc {

enum class OpKind : uint16_t {
#define CPC_OP(kind, name, traits) kind,
#include "dialects/cpc/CpcOpTable.h.inc"
};

/// The traits of CpcBase.td's Cpc_PlanTrait (GroupCollective, PointToPoint, ...).
enum class PlanTrait : uint8_t {
#define CPC_OP_TRAIT(trait) trait,
#include "dialects/cpc/CpcOpTable.h.inc"
};

/// The op's name in the dialect and in plans (OpKind::Add).
const char *opName(OpKind kind);
/// The kind of the op named `name`, or nullopt for a name the dialect does not have.
std::optional<OpKind> findOpKind(std::string_view name);
bool hasTrait(OpKind kind, PlanTrait trait);
/// Whether the op moves data between ranks: a group collective or a send/recv.
inline bool communicates(OpKind kind) {
  return hasTrait(kind, PlanTrait::GroupCollective) || hasTrait(kind, PlanTrait::PointToPoint);
}
/// The kind of the op named `name`; throws std::invalid_argument for a name the dialect lacks
/// (for tests and tools that take op names from people).
OpKind opKindNamed(std::string_view name);
/// Writes the op's name.
std::ostream &operator<<(std::ostream &os, OpKind kind);
/// Every op of the dialect, in the table's order.
const std::vector<OpKind> &allOpKinds();

/// How an op declares an attribute in ODS.
enum class AttrPresence : uint8_t { Required, Optional, Defaulted };
struct OpAttrSpec {
  const char *name;        // "epsilon"
  const char *storage;     // the ODS attribute class: "F64Attr", "DenseI64ArrayAttr", ...
  AttrPresence presence;
  const char *defaultValue; // a Defaulted attribute's: ODS's literal, an enum's case by name ("" otherwise)
};
/// The attributes `kind` declares, in ODS order.
const std::vector<OpAttrSpec> &opAttrSpecs(OpKind kind);

} // namespace cpc

#endif
