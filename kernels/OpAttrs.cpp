//===- OpAttrs.cpp --------------------------------------------------------===//
#include "kernels/OpAttrs.h"
#include "kernels/Tensor.h"

#include <functional>
#include <map>

namespace cpc::kernels {

namespace {

using Json = nlohmann::json;
using Decoder = std::function<void(OpAttrs &, const Json &)>;

[[noreturn]] void wrongType(const std::string &name, const char *expected) {
  throw RuntimeError("attribute '" + name + "' should be " + expected);
}

int64_t asInt(const std::string &name, const Json &v) {
  if (!v.is_number_integer())
    wrongType(name, "an integer");
  return v.get<int64_t>();
}
double asFloat(const std::string &name, const Json &v) {
  if (!v.is_number())
    wrongType(name, "a number");
  return v.get<double>();
}
bool asBool(const std::string &name, const Json &v) {
  if (!v.is_boolean())
    wrongType(name, "true or false");
  return v.get<bool>();
}
std::vector<int64_t> asInts(const std::string &name, const Json &v) {
  if (!v.is_array())
    wrongType(name, "a list of integers");
  std::vector<int64_t> out;
  for (const Json &e : v)
    out.push_back(asInt(name, e));
  return out;
}
std::vector<std::string> asNames(const std::string &name, const Json &v) {
  if (!v.is_array())
    wrongType(name, "a list of names");
  std::vector<std::string> out;
  for (const Json &e : v) {
    if (!e.is_string())
      wrongType(name, "a list of names");
    out.push_back(e.get<std::string>());
  }
  return out;
}
template <typename Enum> Enum asEnum(const std::string &name, const Json &v, std::map<std::string, Enum> names) {
  if (!v.is_string())
    wrongType(name, "a name");
  auto it = names.find(v.get<std::string>());
  if (it == names.end()) {
    std::string known;
    for (auto &[n, e] : names)
      known += (known.empty() ? "" : ", ") + n;
    throw RuntimeError("attribute '" + name + "' is '" + v.get<std::string>() + "' (expected " + known + ")");
  }
  return it->second;
}

#define CPC_INT(field) [](OpAttrs &a, const Json &v) { a.field = asInt(#field, v); }
#define CPC_INTS(field) [](OpAttrs &a, const Json &v) { a.field = asInts(#field, v); }
#define CPC_FLOAT(field) [](OpAttrs &a, const Json &v) { a.field = asFloat(#field, v); }
#define CPC_BOOL(field) [](OpAttrs &a, const Json &v) { a.field = asBool(#field, v); }

/// Every attribute name a kernel reads, and where its value goes.
const std::map<std::string, Decoder> &decoders() {
  static const std::map<std::string, Decoder> table = {
      {"axis",
       [](OpAttrs &a, const Json &v) {
         if (v.is_string())
           a.axisName = v.get<std::string>();
         else
           a.axis = asInt("axis", v);
       }},
      {"k", CPC_INT(k)},
      {"groups", CPC_INT(groups)},
      {"dim_size", [](OpAttrs &a, const Json &v) { a.dimSize = asInt("dim_size", v), a.hasDimSize = true; }},
      {"seed", CPC_INT(seed)},
      {"root", CPC_INT(root)},
      {"peer", CPC_INT(peer)},
      {"channel", CPC_INT(channel)},
      {"dim", CPC_INT(dim)},
      {"split_dim", [](OpAttrs &a, const Json &v) { a.splitDim = asInt("split_dim", v); }},
      {"concat_dim", [](OpAttrs &a, const Json &v) { a.concatDim = asInt("concat_dim", v); }},
      {"axes",
       [](OpAttrs &a, const Json &v) {
         if (v.is_array() && !v.empty() && v[0].is_string())
           a.meshAxes = asNames("axes", v);
         else
           a.axes = asInts("axes", v);
       }},
      {"strides", CPC_INTS(strides)},
      {"padding", CPC_INTS(padding)},
      {"dilations", CPC_INTS(dilations)},
      {"starts", CPC_INTS(starts)},
      {"limits", CPC_INTS(limits)},
      {"permutation", CPC_INTS(permutation)},
      {"interior", CPC_INTS(interior)},
      {"low",
       [](OpAttrs &a, const Json &v) {
         if (v.is_array())
           a.lowPadding = asInts("low", v);
         else
           a.low = asFloat("low", v);
       }},
      {"high",
       [](OpAttrs &a, const Json &v) {
         if (v.is_array())
           a.highPadding = asInts("high", v);
         else
           a.high = asFloat("high", v);
       }},
      {"epsilon", CPC_FLOAT(epsilon)},
      {"beta1", CPC_FLOAT(beta1)},
      {"scale", CPC_FLOAT(scale)},
      {"beta2", CPC_FLOAT(beta2)},
      {"weight_decay", [](OpAttrs &a, const Json &v) { a.weightDecay = asFloat("weight_decay", v); }},
      {"weight_decays",
       [](OpAttrs &a, const Json &v) {
         if (!v.is_array())
           wrongType("weight_decays", "a list of numbers");
         for (const Json &x : v)
           a.weightDecays.push_back(asFloat("weight_decays", x));
       }},
      {"value", [](OpAttrs &a, const Json &v) { a.value = asFloat("value", v), a.hasValue = true; }},
      {"transpose_lhs", [](OpAttrs &a, const Json &v) { a.transposeLhs = asBool("transpose_lhs", v); }},
      {"transpose_rhs", [](OpAttrs &a, const Json &v) { a.transposeRhs = asBool("transpose_rhs", v); }},
      {"keepdims", CPC_BOOL(keepdims)},
      {"largest", CPC_BOOL(largest)},
      {"sorted", CPC_BOOL(sorted)},
      {"descending", CPC_BOOL(descending)},
      {"approximate",
       [](OpAttrs &a, const Json &v) {
         a.approximate = asEnum<GeluApproximation>("approximate", v,
                                                   {{"none", GeluApproximation::None}, {"tanh", GeluApproximation::Tanh}});
       }},
      {"activation",
       [](OpAttrs &a, const Json &v) {
         a.activation = asEnum<Activation>("activation", v, {{"none", Activation::None}, {"gelu", Activation::Gelu}});
       }},
      {"reduction",
       [](OpAttrs &a, const Json &v) {
         a.reduction = asEnum<ScatterReduction>("reduction", v,
                                                {{"none", ScatterReduction::None},
                                                 {"add", ScatterReduction::Add},
                                                 {"mul", ScatterReduction::Mul},
                                                 {"max", ScatterReduction::Max},
                                                 {"min", ScatterReduction::Min}});
       }},
      {"layout",
       [](OpAttrs &a, const Json &v) {
         a.attentionLayout = asEnum<AttentionLayout>(
             "layout", v, {{"bhnd", AttentionLayout::HeadMajor}, {"bnhd", AttentionLayout::TokenMajor}});
       }},
      {"kind",
       [](OpAttrs &a, const Json &v) {
         a.kind = asEnum<CollectiveReduction>("kind", v, {
#define CPC_ENUM_ReductionKind(reduction, name) {name, CollectiveReduction::reduction},
#include "dialects/cpc/CpcOpTable.h.inc"
                                              });
       }},
      {"mesh",
       [](OpAttrs &a, const Json &v) {
         if (!v.is_string())
           wrongType("mesh", "a name");
         a.mesh = v.get<std::string>();
       }},
      {"block_axes", [](OpAttrs &a, const Json &v) { a.blockAxes = asNames("block_axes", v), a.hasBlockAxes = true; }},
      {"sharding", [](OpAttrs &a, const Json &v) { a.sharding = v; }},
  };
  return table;
}

#undef CPC_INT
#undef CPC_INTS
#undef CPC_FLOAT
#undef CPC_BOOL

} // namespace

OpAttrs decodeOpAttrs(const nlohmann::json &attrs) {
  OpAttrs out;
  if (attrs.is_null())
    return out;
  if (!attrs.is_object())
    throw RuntimeError("a step's attributes should be an object");
  const auto &table = decoders();
  for (auto it = attrs.begin(); it != attrs.end(); ++it) {
    const std::string &name = it.key();
    if (name.find('.') != std::string::npos)
      continue; // a discardable annotation (cpc.shardings, pipeline labels): the compiler's
    auto d = table.find(name);
    if (d == table.end())
      throw RuntimeError("unknown attribute '" + name + "'");
    d->second(out, it.value());
  }
  return out;
}

} // namespace cpc::kernels
