//===- OpAttrs.h - a plan step's attributes, decoded once into typed fields ===//
//
// A plan stores each step's op attributes as JSON under their ODS names. The executor decodes
// them once, when it loads the plan, into an OpAttrs; kernels (CPU and CUDA alike) read its
// fields instead of looking names up on every call. The fields, their types, the enums and each
// op's attributes with their presence and defaults are generated from the ODS definitions
// (cpc-tblgen, CpcOpTable.h.inc), so that a name and its default exist once: a field is the
// attribute's name in camelCase ("transpose_lhs" -> transposeLhs), one name has one type across
// the dialect, and an attribute a step leaves out gets ODS's default. Discardable annotations
// (names with a dot, such as "cpc.shardings") are the compiler's, not the kernels', and are
// skipped; an attribute the op does not declare, or a required one missing, is an error, so
// that a plan from another compiler fails clearly instead of running wrong.
//
#ifndef CPC_KERNELS_OPATTRS_H
#define CPC_KERNELS_OPATTRS_H

#include "kernels/OpKind.h"

#include <nlohmann/json.hpp>

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace cpc::kernels {

/// The names of an enum attribute's cases, in value order: `names[size_t(e)]` is the case's
/// name in the dialect and in plans. Specialized by the generated table.
template <typename Enum> struct AttrEnumCases;

// The enums that attributes are stored as: ReductionKind, GeluApproximation, FusedActivation,
// ScatterReduction, AttentionLayout, ... (the dialect's, case for case).
#define CPC_GEN_ATTR_ENUMS
#include "dialects/cpc/CpcOpTable.h.inc"

/// Every attribute name the dialect's ops declare, by its field's name (AttrId::blockAxes).
enum class AttrId : uint8_t {
#define CPC_ATTR(field, name, type) field,
#include "dialects/cpc/CpcOpTable.h.inc"
  Count
};

struct OpAttrs {
#define CPC_ATTR(field, name, type) type field{};
#include "dialects/cpc/CpcOpTable.h.inc"

  /// Whether the step has a value for the attribute: given, or defaulted by ODS. An optional
  /// attribute left out (block_axes, dim) has none, and its field keeps its zero value.
  bool has(AttrId id) const { return present[static_cast<size_t>(id)]; }
  std::bitset<static_cast<size_t>(AttrId::Count)> present;
};

/// Decodes the attributes of a step that runs `op`; throws RuntimeError naming the attribute on
/// one `op` does not declare, a required one missing or a value of the wrong type.
OpAttrs decodeOpAttrs(OpKind op, const nlohmann::json &attrs);

/// The name of an enum attribute's case ("tanh" for GeluApproximation::Tanh).
template <typename Enum> const char *attrEnumName(Enum e) { return AttrEnumCases<Enum>::names[static_cast<size_t>(e)]; }

} // namespace cpc::kernels

#endif
