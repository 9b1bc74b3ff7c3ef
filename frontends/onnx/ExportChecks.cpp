//===- ExportChecks.cpp ---------------------------------------------------===//
#include "frontends/onnx/ExportChecks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

namespace cpc::onnx_import {

namespace {
constexpr const char *kOriginalName = "pkg.torch.onnx.original_node_name";
constexpr const char *kFxNode = "pkg.torch.onnx.fx_node";
constexpr const char *kReexport =
    "re-export with torch.onnx.export(..., dynamo=True, optimize=False), or with dynamo=False and "
    "do_constant_folding=False";

bool isParameterLike(const LoadedModel &model, const onnx::TensorProto &init) {
  if (init.data_type() != onnx::TensorProto_DataType_FLOAT)
    return false;
  if (model.sourceRoles.empty())
    return true; // no signature: every float initializer is trained
  auto it = model.sourceRoles.find(init.name());
  return it != model.sourceRoles.end() && it->second == SourceRole::Parameter;
}

/// The `%name`s an FX node's text passes as arguments ("%y : [...] = call_function[...](args = (%a, %b), ...)").
std::set<std::string> fxArguments(const std::string &fxNode) {
  std::set<std::string> names;
  size_t at = fxNode.find("args = ");
  if (at == std::string::npos)
    return names;
  while ((at = fxNode.find('%', at)) != std::string::npos) {
    size_t end = ++at;
    while (end < fxNode.size() && (std::isalnum((unsigned char)fxNode[end]) || fxNode[end] == '_'))
      ++end;
    names.insert(fxNode.substr(at, end - at));
    at = end;
  }
  return names;
}

/// Parameters a node reads although its FX node (the exporter's record of what it computes)
/// names another one: the exporter merged equal initializers into one.
void findMergedParameters(const LoadedModel &model, std::vector<std::string> &warnings) {
  const onnx::GraphProto &graph = model.proto->graph();
  std::unordered_map<std::string, std::string> original; // initializer -> its FX placeholder
  for (const auto &value : graph.value_info()) {
    std::string name = newerMetadataValue(value, kValueInfoMetadataField, kOriginalName);
    if (!name.empty())
      original[value.name()] = name;
  }
  std::map<std::string, std::vector<std::string>> readers; // merged parameter -> nodes reading it in place of another
  std::vector<std::string> order;
  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto &node = graph.node(index);
    std::string fx = newerMetadataValue(node, kNodeMetadataField, kFxNode);
    if (fx.empty())
      continue;
    std::set<std::string> arguments = fxArguments(fx);
    for (const std::string &input : node.input()) {
      auto it = original.find(input);
      auto role = model.sourceRoles.find(input);
      if (it == original.end() || role == model.sourceRoles.end() || role->second != SourceRole::Parameter ||
          arguments.count(it->second))
        continue;
      if (readers[input].empty())
        order.push_back(input);
      readers[input].push_back(describeNode(node, index));
    }
  }
  for (const std::string &parameter : order) {
    const auto &nodes = readers[parameter];
    warnings.push_back("the export merged other parameters into '" + parameter + "' (equal values): " +
                       nodes.front() + (nodes.size() > 1 ? " and " + std::to_string(nodes.size() - 1) + " more" : "") +
                       " read it in place of their own, so they would train as one; " + kReexport);
  }
}

std::vector<float> readFloats(const WeightStore &weights, const onnx::TensorProto &init) {
  std::vector<float> values(weights.byteSize(init.name()) / sizeof(float));
  weights.read(init.name(), values.data());
  return values;
}

/// Transposing keeps the sum and the sum of squares (up to the order of the additions): pairs
/// that differ there are not compared element by element.
struct Fingerprint {
  double sum = 0, squares = 0;
  bool constantFill = true; // a fill matches any transpose: never reported
  bool operator==(const Fingerprint &o) const {
    double scale = 1e-9 * (std::abs(squares) + std::abs(o.squares) + 1e-30);
    return std::abs(squares - o.squares) <= scale && std::abs(sum - o.sum) <= 1e-6 * std::sqrt(squares + o.squares);
  }
};

Fingerprint fingerprint(const std::vector<float> &values) {
  // Eight running sums, not one: a chain of dependent additions was most of the import of a
  // large model whose matrices all have transposed partners (GPT's fc1 and fc2).
  constexpr size_t kLanes = 8;
  double sums[kLanes] = {}, squares[kLanes] = {};
  bool constant = true;
  size_t i = 0, n = values.size();
  for (; i + kLanes <= n; i += kLanes)
    for (size_t l = 0; l < kLanes; ++l) {
      double v = values[i + l];
      sums[l] += v;
      squares[l] += v * v;
      constant &= values[i + l] == values[0];
    }
  for (; i < n; ++i) {
    double v = values[i];
    sums[0] += v;
    squares[0] += v * v;
    constant &= values[i] == values[0];
  }
  Fingerprint f;
  for (size_t l = 0; l < kLanes; ++l) {
    f.sum += sums[l];
    f.squares += squares[l];
  }
  f.constantFill = constant;
  return f;
}

bool isTransposeOf(const std::vector<float> &copy, const std::vector<float> &parameter, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      if (std::memcmp(&copy[i * cols + j], &parameter[j * rows + i], sizeof(float)) != 0)
        return false;
  return true;
}

/// Constant matrices equal to a parameter transposed: a tied weight the exporter folded into a
/// copy that does not train with the parameter.
void findFoldedTransposes(const LoadedModel &model, const WeightStore &weights, std::set<std::string> &reported,
                          std::vector<std::string> &warnings) {
  // Only matrices with a partner of the transposed shape are read (import reads no weight else).
  std::map<std::pair<int64_t, int64_t>, std::vector<const onnx::TensorProto *>> byShape;
  for (const auto &init : model.proto->graph().initializer())
    if (init.data_type() == onnx::TensorProto_DataType_FLOAT && init.dims_size() == 2 && init.dims(0) > 1 &&
        init.dims(1) > 1)
      byShape[{init.dims(0), init.dims(1)}].push_back(&init);
  std::vector<std::pair<const onnx::TensorProto *, Fingerprint>> matrices;
  for (const auto &[shape, inits] : byShape) {
    auto partners = byShape.find({shape.second, shape.first});
    if (partners == byShape.end() || (shape.first == shape.second && inits.size() < 2))
      continue;
    for (const onnx::TensorProto *init : inits)
      matrices.emplace_back(init, fingerprint(readFloats(weights, *init)));
  }
  for (const auto &[copy, copyPrint] : matrices) {
    if (copyPrint.constantFill || (!model.sourceRoles.empty() && isParameterLike(model, *copy)))
      continue; // with a signature, only constants can be folded copies
    for (const auto &[parameter, parameterPrint] : matrices) {
      if (parameter == copy || !(parameterPrint == copyPrint) || !isParameterLike(model, *parameter) ||
          parameter->dims(0) != copy->dims(1) || parameter->dims(1) != copy->dims(0) ||
          !isTransposeOf(readFloats(weights, *copy), readFloats(weights, *parameter), copy->dims(0), copy->dims(1)))
        continue;
      reported.insert(copy->name());
      warnings.push_back("initializer '" + copy->name() + "' is parameter '" + parameter->name() +
                         "' transposed, folded by the exporter (a tied weight): it would not train with it; " +
                         kReexport);
    }
  }
}

/// The operands of a node that a model trains when they are initializers: a Conv's weight, a
/// MatMul's or Gemm's matrices.
bool isWeightOperand(const onnx::NodeProto &node, int operand) {
  if (node.op_type() == "Conv" || node.op_type() == "ConvTranspose")
    return operand == 1;
  return (node.op_type() == "MatMul" || node.op_type() == "Gemm") && operand < 2;
}

/// In an export with a graph signature, weights that are constants the exporter computed (from
/// parameters: a BatchNorm folded into a convolution, a transposed Linear weight) rather than
/// parameters: they would stay fixed. One line, naming the first.
void findFoldedWeights(const LoadedModel &model, const std::set<std::string> &reported,
                       std::vector<std::string> &warnings) {
  if (model.sourceRoles.empty())
    return;
  const onnx::GraphProto &graph = model.proto->graph();
  std::set<std::string> constants;
  for (const auto &init : graph.initializer())
    if (init.data_type() == onnx::TensorProto_DataType_FLOAT && init.dims_size() >= 2 &&
        !model.sourceRoles.count(init.name()) && !reported.count(init.name()))
      constants.insert(init.name());
  std::set<std::string> found;
  std::string first;
  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto &node = graph.node(index);
    for (int i = 0; i < node.input_size(); ++i)
      if (constants.count(node.input(i)) && isWeightOperand(node, i) && found.insert(node.input(i)).second &&
          first.empty())
        first = "'" + node.input(i) + "' read by " + describeNode(node, index);
  }
  if (found.empty())
    return;
  warnings.push_back(std::to_string(found.size()) + " weight(s) of Conv/MatMul/Gemm nodes are constants the exporter "
                     "computed, not parameters of the graph signature (first: " + first +
                     "): they would not train (the export folded parameters into them, e.g. BatchNorm into a "
                     "convolution); " + kReexport);
}
} // namespace

std::vector<std::string> exportChangedModelWarnings(const LoadedModel &model, const WeightStore &weights) {
  std::vector<std::string> warnings;
  findMergedParameters(model, warnings);
  std::set<std::string> reported;
  findFoldedTransposes(model, weights, reported, warnings);
  findFoldedWeights(model, reported, warnings);
  return warnings;
}

} // namespace cpc::onnx_import
