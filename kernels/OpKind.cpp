//===- OpKind.cpp - the generated op table, as lookups --------------------===//
#include "kernels/OpKind.h"

#include <array>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>

namespace cpc {

namespace {

#define CPC_TRAIT_BIT(trait) (1u << static_cast<unsigned>(PlanTrait::trait))

struct OpEntry {
  const char *name;
  uint32_t traits;
};

constexpr OpEntry kOps[] = {
#define CPC_OP(kind, name, traits) {name, traits},
#include "dialects/cpc/CpcOpTable.h.inc"
};
constexpr size_t kNumOps = sizeof(kOps) / sizeof(kOps[0]);

const OpEntry &entry(OpKind kind) { return kOps[static_cast<size_t>(kind)]; }

} // namespace

const char *opName(OpKind kind) { return entry(kind).name; }

std::optional<OpKind> findOpKind(std::string_view name) {
  static const std::map<std::string_view, OpKind> byName = [] {
    std::map<std::string_view, OpKind> m;
    for (size_t i = 0; i < kNumOps; ++i)
      m.emplace(kOps[i].name, static_cast<OpKind>(i));
    return m;
  }();
  auto it = byName.find(name);
  if (it == byName.end())
    return std::nullopt;
  return it->second;
}

OpKind opKindNamed(std::string_view name) {
  if (std::optional<OpKind> kind = findOpKind(name))
    return *kind;
  throw std::invalid_argument("no op of the cpc dialect is named '" + std::string(name) + "'");
}

std::ostream &operator<<(std::ostream &os, OpKind kind) { return os << opName(kind); }

bool hasTrait(OpKind kind, PlanTrait trait) { return entry(kind).traits & (1u << static_cast<unsigned>(trait)); }

const std::vector<OpKind> &allOpKinds() {
  static const std::vector<OpKind> kinds = [] {
    std::vector<OpKind> all;
    for (size_t i = 0; i < kNumOps; ++i)
      all.push_back(static_cast<OpKind>(i));
    return all;
  }();
  return kinds;
}

const std::vector<OpAttrSpec> &opAttrSpecs(OpKind kind) {
  static const std::array<std::vector<OpAttrSpec>, kNumOps> specs = [] {
    std::array<std::vector<OpAttrSpec>, kNumOps> all;
#define CPC_OP_ATTR(kind, field, name, storage, presence, value)                                          \
  all[static_cast<size_t>(OpKind::kind)].push_back({name, #storage, AttrPresence::presence, value});
#include "dialects/cpc/CpcOpTable.h.inc"
    return all;
  }();
  return specs[static_cast<size_t>(kind)];
}

} // namespace cpc
