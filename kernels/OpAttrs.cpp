//===- OpAttrs.cpp - each op's attributes, decoded by the rules ODS gives --===//
#include "kernels/OpAttrs.h"
#include "kernels/Tensor.h"

#include <algorithm>
#include <iterator>
#include <type_traits>

namespace cpc::kernels {

namespace {

using Json = nlohmann::json;

[[noreturn]] void wrongType(const char *name, const char *expected) {
  throw RuntimeError(std::string("attribute '") + name + "' should be " + expected);
}

// One decoder per field type; the generated rows pick the one of the field they fill.
void decode(int64_t &out, const char *name, const Json &v) {
  if (!v.is_number_integer())
    wrongType(name, "an integer");
  out = v.get<int64_t>();
}
void decode(double &out, const char *name, const Json &v) {
  if (!v.is_number())
    wrongType(name, "a number");
  out = v.get<double>();
}
void decode(bool &out, const char *name, const Json &v) {
  if (!v.is_boolean())
    wrongType(name, "true or false");
  out = v.get<bool>();
}
void decode(std::string &out, const char *name, const Json &v) {
  if (!v.is_string())
    wrongType(name, "a name");
  out = v.get<std::string>();
}
template <typename T> void decode(std::vector<T> &out, const char *name, const Json &v) {
  if (!v.is_array())
    wrongType(name, "a list");
  out.assign(v.size(), T{});
  for (size_t i = 0; i < v.size(); ++i)
    decode(out[i], name, v[i]);
}
void decode(Json &out, const char *, const Json &v) { out = v; } // a sharding: its kernel reads it
template <typename Enum, typename = std::enable_if_t<std::is_enum_v<Enum>>>
void decode(Enum &out, const char *name, const Json &v) {
  if (!v.is_string())
    wrongType(name, "a name");
  const auto &names = AttrEnumCases<Enum>::names;
  for (size_t i = 0; i < std::size(names); ++i)
    if (v.get<std::string>() == names[i]) {
      out = static_cast<Enum>(i);
      return;
    }
  std::string known;
  for (const char *n : names)
    known += (known.empty() ? "" : ", ") + std::string(n);
  throw RuntimeError(std::string("attribute '") + name + "' is '" + v.get<std::string>() + "' (expected " + known + ")");
}

/// How an op declares one attribute, and how a step's value (or its absence) fills the field.
struct AttrRule {
  const char *name;
  AttrId id;
  AttrPresence presence;
  void (*decode)(OpAttrs &, const Json &);
  void (*setDefault)(OpAttrs &) = nullptr; // Defaulted: ODS's default
};

const std::vector<AttrRule> &rulesOf(OpKind op) {
  static const std::vector<std::vector<AttrRule>> all = [] {
    std::vector<std::vector<AttrRule>> rules(allOpKinds().size());
#define CPC_OP_ATTR(kind, field, name, storage, presence, value)                                                  \
  rules[static_cast<size_t>(OpKind::kind)].push_back(                                                             \
      {name, AttrId::field, AttrPresence::presence, [](OpAttrs &a, const Json &v) { decode(a.field, name, v); }});
#include "dialects/cpc/CpcOpTable.h.inc"
#define CPC_OP_ATTR_DEFAULT(kind, field, value)                                                                    \
  for (AttrRule & rule : rules[static_cast<size_t>(OpKind::kind)])                                                 \
    if (rule.id == AttrId::field)                                                                                  \
      rule.setDefault = [](OpAttrs &a) { a.field = value; };
#include "dialects/cpc/CpcOpTable.h.inc"
    return rules;
  }();
  return all[static_cast<size_t>(op)];
}

} // namespace

OpAttrs decodeOpAttrs(OpKind op, const nlohmann::json &attrs) {
  if (!attrs.is_null() && !attrs.is_object())
    throw RuntimeError("a step's attributes should be an object");
  OpAttrs out;
  const std::vector<AttrRule> &rules = rulesOf(op);
  for (const AttrRule &rule : rules)
    if (rule.setDefault) {
      rule.setDefault(out);
      out.present.set(static_cast<size_t>(rule.id));
    }
  if (attrs.is_object())
    for (auto it = attrs.begin(); it != attrs.end(); ++it) {
      const std::string &name = it.key();
      if (name.find('.') != std::string::npos)
        continue; // a discardable annotation (cpc.shardings, pipeline labels): the compiler's
      auto rule = std::find_if(rules.begin(), rules.end(), [&](const AttrRule &r) { return name == r.name; });
      if (rule == rules.end())
        throw RuntimeError("unknown attribute '" + name + "'");
      rule->decode(out, it.value());
      out.present.set(static_cast<size_t>(rule->id));
    }
  for (const AttrRule &rule : rules)
    if (rule.presence == AttrPresence::Required && !out.has(rule.id))
      throw RuntimeError(std::string("missing attribute '") + rule.name + "'");
  return out;
}

} // namespace cpc::kernels
