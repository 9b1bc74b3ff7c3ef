//===- Importer.cpp - drives the import of one ONNX graph -----------------===//
#include "frontends/onnx/ExportChecks.h"
#include "frontends/onnx/ModelLoader.h"
#include "frontends/onnx/OpVersions.h"
#include "frontends/onnx/NodeImporter.h"
#include "frontends/onnx/OnnxImporter.h"
#include "dialects/cpc/Variables.h"
#include "passes/Passes.h"
#include "support/CheckedSize.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <regex>
#include <unordered_map>

using namespace mlir;

namespace cpc::onnx_import {

/// Everything that lives for one import.
class ImportState {
public:
  ImportState(MLIRContext &ctx, const LoadedModel &model, const ImportOptions &options)
      : ctx(ctx), model(model), options(options), builder(&ctx) {}

  MLIRContext &ctx;
  const LoadedModel &model;
  const ImportOptions &options;
  OpBuilder builder;      // where node ops go
  std::unordered_map<std::string, ImportedValue> values;
  std::unordered_map<std::string, const onnx::TensorProto *> parameters; // not yet materialized
  std::vector<std::regex> frozen;
  bool readBatchStatisticGroups = false; // the IR depends on options.batchStatisticGroups

  [[noreturn]] void fail(const std::string &message) const { throw ImportError(model.path + ": " + message); }

  Type elementType(int onnxType) {
    switch (onnxType) {
    case onnx::TensorProto_DataType_FLOAT: return builder.getF32Type();
    case onnx::TensorProto_DataType_DOUBLE: return builder.getF64Type();
    case onnx::TensorProto_DataType_FLOAT16: return builder.getF16Type();
    case onnx::TensorProto_DataType_BFLOAT16: return builder.getBF16Type();
    case onnx::TensorProto_DataType_INT64: return builder.getI64Type();
    case onnx::TensorProto_DataType_INT32: return builder.getI32Type();
    case onnx::TensorProto_DataType_INT16: return builder.getI16Type();
    case onnx::TensorProto_DataType_INT8: return builder.getI8Type();
    case onnx::TensorProto_DataType_UINT8: return builder.getIntegerType(8, /*isSigned=*/false);
    case onnx::TensorProto_DataType_BOOL: return builder.getI1Type();
    default: return {};
    }
  }

  /// An initializer the exporter's signature says is neither a parameter nor a buffer.
  bool isExportedConstant(const std::string &name) const {
    if (model.sourceRoles.empty())
      return false;
    auto it = model.sourceRoles.find(name);
    return it == model.sourceRoles.end() || it->second == SourceRole::Constant;
  }

  /// Trained: a float parameter, not frozen, and a parameter (not a buffer) where the export says.
  bool isTrainable(const std::string &name, Type type) const {
    if (!llvm::isa<FloatType>(type.cast<ShapedType>().getElementType()) || isFrozen(name))
      return false;
    if (model.sourceRoles.empty())
      return true;
    auto it = model.sourceRoles.find(name);
    return it != model.sourceRoles.end() && it->second == SourceRole::Parameter;
  }

  bool isFrozen(const std::string &name) const {
    for (const auto &re : frozen)
      if (std::regex_search(name, re))
        return true;
    return false;
  }

  ImportedValue &lookup(const std::string &name) {
    auto it = values.find(name);
    if (it != values.end())
      return it->second;
    auto param = parameters.find(name);
    if (param != parameters.end()) {
      const onnx::TensorProto &t = *param->second;
      std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
      auto type = RankedTensorType::get(dims, elementType(t.data_type()));
      bool trainable = isTrainable(name, type);
      auto module = builder.getInsertionBlock()->getParentOp()->getParentOfType<ModuleOp>();
      VariableOp variable = declareVariable(module, name, type, std::nullopt, trainable);
      auto op = builder.create<ParameterOp>(NameLoc::get(builder.getStringAttr(name)), variable);
      return values[name] = ImportedValue{op.getResult(), nullptr, type};
    }
    throw NodeError("uses value '" + name + "', which nothing defines");
  }
};

//===----------------------------------------------------------------------===//
// NodeImporter
//===----------------------------------------------------------------------===//

NodeImporter::NodeImporter(ImportState &state, const onnx::NodeProto &node, int opset, Location loc)
    : state_(state), node_(node), opset_(opset), loc_(loc) {}

OpBuilder &NodeImporter::builder() { return state_.builder; }
MLIRContext *NodeImporter::context() { return &state_.ctx; }

void NodeImporter::fail(const std::string &message) const { throw NodeError(message); }

int64_t NodeImporter::batchStatisticGroups() const {
  state_.readBatchStatisticGroups = true;
  return state_.options.batchStatisticGroups;
}

int64_t NodeImporter::randomStreamSeed() {
  // FNV-1a of the name, then splitmix64's finalizer over each part: stable across builds and
  // platforms (std::hash is neither).
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  uint64_t name = 0xCBF29CE484222325ull;
  for (unsigned char c : node_.output(0))
    name = (name ^ c) * 0x100000001B3ull;
  uint64_t own = hasAttr("seed") ? (uint64_t)saturatingInt64(attrFloat("seed")) : 0;
  uint64_t seed = mix(mix(mix(state_.options.randomSeed) ^ name) ^ own);
  return (int64_t)(seed >> 1); // an I64 attribute: kept non-negative
}

/// The tensor behind input i: fails when it is missing or a sequence.
static ImportedValue &tensorInput(ImportState &state, const onnx::NodeProto &node, size_t i,
                                  const NodeImporter &n) {
  if (i >= (size_t)node.input_size() || node.input(i).empty())
    n.fail("input " + std::to_string(i) + " is required");
  ImportedValue &v = state.lookup(node.input(i));
  if (v.sequence)
    n.fail("input " + std::to_string(i) + " ('" + node.input(i) + "') is a sequence, not a tensor");
  return v;
}

const ImportedValue &NodeImporter::inputValue(size_t i) {
  if (!hasInput(i))
    fail("input " + std::to_string(i) + " is required");
  return state_.lookup(node_.input(i));
}

const ImportedSequence &NodeImporter::inputSequence(size_t i) {
  const ImportedValue &v = inputValue(i);
  if (!v.sequence)
    fail("input " + std::to_string(i) + " ('" + node_.input(i) + "') is a tensor, not a sequence");
  return *v.sequence;
}

Value NodeImporter::input(size_t i) {
  ImportedValue &v = tensorInput(state_, node_, i, *this);
  if (!v.value)
    v.value = constant(*v.host);
  return v.value;
}

RankedTensorType NodeImporter::inputType(size_t i) {
  return tensorInput(state_, node_, i, *this).type;
}

std::vector<int64_t> NodeImporter::inputShape(size_t i) {
  auto shape = inputType(i).getShape();
  return {shape.begin(), shape.end()};
}

const ConstTensor *NodeImporter::constInput(size_t i) {
  if (!hasInput(i))
    return nullptr;
  return tensorInput(state_, node_, i, *this).host.get();
}

const ConstTensor &NodeImporter::requireConstInput(size_t i, const std::string &what) {
  const ConstTensor *c = constInput(i);
  if (!c)
    fail("input " + std::to_string(i) + " (" + what +
         ") must be a constant or computable from static shapes");
  return *c;
}

const ConstTensor &NodeImporter::requireConstScalar(size_t i, const std::string &what) {
  const ConstTensor &c = requireConstInput(i, what);
  if (c.numElements() != 1)
    fail("input " + std::to_string(i) + " (" + what + ") must hold one element, not " +
         std::to_string(c.numElements()));
  return c;
}

bool NodeImporter::allInputsConstant() {
  for (size_t i = 0; i < numInputs(); ++i)
    if (hasInput(i) && !constInput(i))
      return false;
  return true;
}

static const onnx::AttributeProto *findAttr(const onnx::NodeProto &node, const std::string &name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

bool NodeImporter::hasAttr(const std::string &name) const { return findAttr(node_, name); }

int64_t NodeImporter::attrInt(const std::string &name, std::optional<int64_t> fallback) const {
  if (auto *a = findAttr(node_, name))
    return a->i();
  if (!fallback)
    fail("missing attribute '" + name + "'");
  return *fallback;
}

double NodeImporter::attrFloat(const std::string &name, std::optional<double> fallback) const {
  if (auto *a = findAttr(node_, name))
    return a->f();
  if (!fallback)
    fail("missing attribute '" + name + "'");
  return *fallback;
}

std::string NodeImporter::attrString(const std::string &name, std::optional<std::string> fallback) const {
  if (auto *a = findAttr(node_, name))
    return a->s();
  if (!fallback)
    fail("missing attribute '" + name + "'");
  return *fallback;
}

std::vector<int64_t> NodeImporter::attrInts(const std::string &name,
                                            std::optional<std::vector<int64_t>> fallback) const {
  if (auto *a = findAttr(node_, name))
    return {a->ints().begin(), a->ints().end()};
  if (!fallback)
    fail("missing attribute '" + name + "'");
  return *fallback;
}

const onnx::TensorProto &NodeImporter::attrTensor(const std::string &name) const {
  auto *a = findAttr(node_, name);
  if (!a || !a->has_t())
    fail("missing tensor attribute '" + name + "'");
  return a->t();
}

void NodeImporter::expectOnlyAttrs(std::initializer_list<const char *> known) const {
  for (const auto &a : node_.attribute()) {
    bool ok = false;
    for (const char *k : known)
      ok |= a.name() == k;
    if (!ok)
      fail("attribute '" + a.name() + "' is not supported");
  }
}

void NodeImporter::setOutput(size_t i, Value value) {
  if (i >= (size_t)node_.output_size() || node_.output(i).empty())
    return; // optional output nobody reads
  auto type = llvm::cast<RankedTensorType>(value.getType());
  if (!tensorTypeBytes(type))
    fail("output '" + node_.output(i) + "': " +
         tensorSizeProblem(type.getShape(), (type.getElementTypeBitWidth() + 7) / 8));
  state_.values[node_.output(i)] = ImportedValue{value, nullptr, llvm::cast<RankedTensorType>(value.getType())};
}

void NodeImporter::setOutput(size_t i, ConstTensor host) {
  if (i >= (size_t)node_.output_size() || node_.output(i).empty())
    return;
  state_.values[node_.output(i)] = imported(std::move(host));
}

void NodeImporter::setOutput(size_t i, const ImportedValue &value) {
  if (i >= (size_t)node_.output_size() || node_.output(i).empty())
    return;
  state_.values[node_.output(i)] = value;
}

ImportedValue NodeImporter::imported(Value value) {
  return ImportedValue{value, nullptr, llvm::cast<RankedTensorType>(value.getType()), nullptr};
}

ImportedValue NodeImporter::imported(ConstTensor host) {
  auto type = RankedTensorType::get(host.shape(), elementType(host.type()));
  return ImportedValue{Value(), std::make_shared<const ConstTensor>(std::move(host)), type, nullptr};
}

Type NodeImporter::elementType(int onnxType) {
  Type t = state_.elementType(onnxType);
  if (!t)
    fail("element type " + dataTypeName(onnxType) + " is not supported");
  return t;
}

int64_t NodeImporter::normalizeAxis(int64_t axis, int64_t rank) const {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return a;
}

Value NodeImporter::constant(const ConstTensor &host) {
  auto type = RankedTensorType::get(host.shape(), elementType(host.type()));
  Type et = type.getElementType();
  int64_t n = host.numElements();
  DenseElementsAttr attr;
  if (auto ft = llvm::dyn_cast<FloatType>(et)) {
    SmallVector<APFloat> vals;
    vals.reserve(n);
    for (int64_t i = 0; i < n; ++i) {
      APFloat v(host.getDouble(i));
      bool lost;
      v.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      vals.push_back(v);
    }
    attr = DenseElementsAttr::get(type, vals);
  } else {
    unsigned width = et.getIntOrFloatBitWidth();
    SmallVector<APInt> vals;
    vals.reserve(n);
    for (int64_t i = 0; i < n; ++i)
      vals.push_back(APInt(width, (uint64_t)host.getInt(i), /*isSigned=*/true));
    attr = DenseElementsAttr::get(type, vals);
  }
  return builder().create<ConstantOp>(loc_, attr).getResult();
}

static std::string typeName(Type type) {
  std::string out;
  llvm::raw_string_ostream os(out);
  type.print(os);
  return out;
}

Value NodeImporter::scalar(double value, Type elementType) {
  if (!llvm::isa<FloatType>(elementType)) {
    // An attribute like Gemm's alpha on integer tensors: only whole numbers the type holds.
    if (!(value == std::trunc(value)) || value >= 0x1p63 || value < -0x1p63) {
      char text[32];
      std::snprintf(text, sizeof(text), "%.17g", value);
      fail(std::string("constant ") + text + " is not a value of " + typeName(elementType));
    }
    return intScalar((int64_t)value, elementType);
  }
  auto type = RankedTensorType::get({}, elementType);
  Attribute v = builder().getFloatAttr(elementType, value);
  return builder().create<ConstantOp>(loc_, DenseElementsAttr::get(type, v)).getResult();
}

Value NodeImporter::intScalar(int64_t value, Type elementType) {
  unsigned width = elementType.getIntOrFloatBitWidth();
  bool fits = width >= 64 || (elementType.isUnsignedInteger() || width == 1 ? llvm::isUIntN(width, value)
                                                                            : llvm::isIntN(width, value));
  if (!fits)
    fail("constant " + std::to_string(value) + " is not a value of " + typeName(elementType));
  auto type = RankedTensorType::get({}, elementType);
  Attribute v = builder().getIntegerAttr(elementType, llvm::APInt(width, (uint64_t)value, /*isSigned=*/true));
  return builder().create<ConstantOp>(loc_, DenseElementsAttr::get(type, v)).getResult();
}

Value NodeImporter::reshape(Value v, llvm::ArrayRef<int64_t> shape) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  if (type.getShape() == shape)
    return v;
  return emitTyped<ReshapeOp>(RankedTensorType::get(shape, type.getElementType()), {v});
}

Value NodeImporter::transpose(Value v, llvm::ArrayRef<int64_t> perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity &= perm[i] == (int64_t)i;
  if (identity)
    return v;
  return emit1<TransposeOp>({v}, {namedI64s("permutation", perm)});
}

NamedAttribute NodeImporter::namedI64(const char *name, int64_t v) {
  return builder().getNamedAttr(name, builder().getI64IntegerAttr(v));
}
NamedAttribute NodeImporter::namedI64s(const char *name, llvm::ArrayRef<int64_t> v) {
  return builder().getNamedAttr(name, builder().getDenseI64ArrayAttr(v));
}
NamedAttribute NodeImporter::namedF64(const char *name, double v) {
  return builder().getNamedAttr(name, builder().getF64FloatAttr(v));
}
NamedAttribute NodeImporter::namedBool(const char *name, bool v) {
  return builder().getNamedAttr(name, builder().getBoolAttr(v));
}
NamedAttribute NodeImporter::namedStr(const char *name, llvm::StringRef v) {
  return builder().getNamedAttr(name, builder().getStringAttr(v));
}

NamedAttribute NodeImporter::namedScatterReduction(llvm::StringRef reduction) {
  std::optional<ScatterReduction> kind = symbolizeScatterReduction(reduction);
  if (!kind)
    fail("reduction '" + reduction.str() + "' is not one of none, add, mul, max, min");
  return builder().getNamedAttr(ScatterNDOp::getReductionAttrName(OperationName(ScatterNDOp::getOperationName(), context())),
                                ScatterReductionAttr::get(context(), *kind));
}

LogicalResult NodeImporter::inferWithDiagnostics(
    const std::function<LogicalResult(SmallVectorImpl<Type> &)> &infer, SmallVectorImpl<Type> &types) {
  ScopedDiagnosticHandler handler(context(), [&](Diagnostic &diag) {
    lastDiagnostic_ = diag.str();
    return success();
  });
  return infer(types);
}

void NodeImporter::failWithDiagnostic() {
  fail(lastDiagnostic_.empty() ? "shapes of the inputs do not fit the op" : lastDiagnostic_);
}

const Handler *HandlerRegistry::find(const std::string &opType, int opset) const {
  auto it = table_.find(opType);
  if (it == table_.end())
    return nullptr;
  int version = opVersionAt(opType, opset);
  if (version == 0)
    version = opset; // not in the ONNX table: a range over opsets
  for (const auto &entry : it->second)
    if (version >= entry.minVersion && version <= entry.maxVersion)
      return &entry.handler;
  return nullptr;
}

static const HandlerRegistry &handlers() {
  static const HandlerRegistry registry = [] {
    HandlerRegistry r;
    registerElementwiseHandlers(r);
    registerShapeHandlers(r);
    registerNeuralHandlers(r);
    registerReductionHandlers(r);
    registerLossHandlers(r);
    registerSequenceHandlers(r);
    registerPoolingHandlers(r);
    registerResizeHandlers(r);
    return r;
  }();
  return registry;
}

//===----------------------------------------------------------------------===//
// The driver.
//===----------------------------------------------------------------------===//

namespace {

/// The type of graph input `name`; fails when the tensor is larger than cpc supports.
RankedTensorType checkedInputType(ImportState &state, const std::string &name, const std::vector<int64_t> &dims,
                                  Type et) {
  auto type = RankedTensorType::get(dims, et);
  if (!tensorTypeBytes(type))
    state.fail("graph input '" + name + "': " + tensorSizeProblem(dims, (et.getIntOrFloatBitWidth() + 7) / 8));
  return type;
}

RankedTensorType graphInputType(ImportState &state, const onnx::ValueInfoProto &input) {
  const std::string &name = input.name();
  if (!input.type().has_tensor_type())
    state.fail("graph input '" + name + "' is not a tensor");
  const auto &tt = input.type().tensor_type();
  Type et = state.elementType(tt.elem_type());
  if (!et)
    state.fail("graph input '" + name + "' has unsupported element type " + dataTypeName(tt.elem_type()));
  auto given = state.options.inputShapes.find(name);
  if (given != state.options.inputShapes.end()) {
    if (tt.has_shape() && tt.shape().dim_size() != (int)given->second.size())
      state.fail("--input-shape " + name + " has rank " + std::to_string(given->second.size()) +
                 " but the model's input has rank " + std::to_string(tt.shape().dim_size()));
    for (size_t d = 0; d < given->second.size(); ++d) {
      int64_t size = given->second[d];
      if (tt.has_shape() && tt.shape().dim(d).has_dim_value() && tt.shape().dim(d).dim_value() != size)
        state.fail("--input-shape " + name + " sets dim " + std::to_string(d) + " to " +
                   std::to_string(size) + " but the model fixes it to " +
                   std::to_string(tt.shape().dim(d).dim_value()));
    }
    return checkedInputType(state, name, given->second, et);
  }
  if (!tt.has_shape())
    state.fail("graph input '" + name + "' has no shape; pass --input-shape " + name + "=AxBx...");
  std::vector<int64_t> dims;
  for (int d = 0; d < tt.shape().dim_size(); ++d) {
    const auto &dim = tt.shape().dim(d);
    if (!dim.has_dim_value() || dim.dim_value() <= 0) {
      std::string label = dim.has_dim_param() ? " ('" + dim.dim_param() + "')" : "";
      state.fail("graph input '" + name + "' has dynamic dim " + std::to_string(d) + label +
                 "; pass --input-shape " + name + "=AxBx... with static sizes");
    }
    dims.push_back(dim.dim_value());
  }
  return checkedInputType(state, name, dims, et);
}
} // namespace

} // namespace cpc::onnx_import

namespace cpc {
using namespace onnx_import;

void registerImporterDialects(MLIRContext &context) {
  context.getOrLoadDialect<CpcDialect>();
  context.getOrLoadDialect<func::FuncDialect>();
}

void parseInputShapeFlag(const std::string &flag, ImportOptions &options) {
  size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size())
    throw ImportError("--input-shape expects NAME=AxBxC, got '" + flag + "'");
  std::vector<int64_t> dims;
  std::string rest = flag.substr(eq + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    size_t x = rest.find('x', start);
    std::string part = rest.substr(start, x == std::string::npos ? std::string::npos : x - start);
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end || v <= 0 || !std::isdigit((unsigned char)part[0]))
      throw ImportError("--input-shape " + flag + ": dims must be positive integers separated by 'x'");
    if (errno == ERANGE)
      throw ImportError("--input-shape " + flag + ": dim '" + part + "' is too large");
    dims.push_back(v);
    if (x == std::string::npos)
      break;
    start = x + 1;
  }
  options.inputShapes[flag.substr(0, eq)] = dims;
}

// Over 80 lines: the import phases in order (read, check, infer shapes, fold, convert, clean up), each a
// few lines over shared state; to become a registered import pipeline of passes (issue 30, item 5).
ImportedModel importOnnxFile(MLIRContext &context, const std::string &path, const ImportOptions &options) {
  registerImporterDialects(context);
  LoadedModel model = parseModel(path);
  const onnx::GraphProto &graph = model.proto->graph();
  // Unsupported ops first: their message names the node, which the ONNX checker's does not.
  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto &node = graph.node(index);
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (defaultDomain && handlers().find(node.op_type(), model.opset))
      continue;
    std::string where = describeNode(node, index);
    if (defaultDomain && handlers().knows(node.op_type()))
      throw ImportError(path + ": " + where + ": op " + node.op_type() + " is not supported at opset " +
                        std::to_string(model.opset));
    std::string opName = defaultDomain ? node.op_type() : node.domain() + "::" + node.op_type();
    throw ImportError(path + ": " + where + ": unsupported op type '" + opName + "'");
  }
  validateModel(model);
  ImportState state(context, model, options);
  for (const auto &pattern : options.frozenPatterns) {
    try {
      state.frozen.emplace_back(pattern);
    } catch (const std::regex_error &) {
      throw ImportError("--frozen: '" + pattern + "' is not a valid regular expression");
    }
  }

  // Initializers: integer ones are constants (shape arithmetic), float ones parameters.
  std::unordered_map<std::string, bool> isInitializer;
  for (const auto &init : graph.initializer()) {
    isInitializer[init.name()] = true;
    if (!state.elementType(init.data_type()))
      state.fail("initializer '" + init.name() + "' has unsupported element type " +
                 dataTypeName(init.data_type()));
    bool external = init.data_location() == onnx::TensorProto_DataLocation_EXTERNAL;
    try {
      checkTensorProtoSize(init, !external);
    } catch (const std::exception &e) {
      state.fail("initializer '" + init.name() + "': " + e.what());
    }
    if ((!isFloatType((onnx::TensorProto_DataType)init.data_type()) || state.isExportedConstant(init.name())) &&
        !external) {
      try {
        auto host = std::make_shared<const ConstTensor>(ConstTensor::fromProto(init));
        auto type = RankedTensorType::get(host->shape(), state.elementType(init.data_type()));
        state.values[init.name()] = ImportedValue{Value(), host, type};
      } catch (const std::exception &e) {
        state.fail("initializer '" + init.name() + "': " + e.what());
      }
    } else {
      state.parameters[init.name()] = &init;
    }
  }
  for (const auto &name : options.inputShapes) {
    bool found = false;
    for (const auto &in : graph.input())
      found |= in.name() == name.first;
    if (!found || isInitializer.count(name.first))
      state.fail("--input-shape names '" + name.first + "', which is not a graph input" +
                 (isInitializer.count(name.first) ? " but an initializer" : ""));
  }

  // The function: graph inputs (minus initializers listed as inputs) are its arguments.
  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  for (const auto &in : graph.input()) {
    if (isInitializer.count(in.name()))
      continue;
    argTypes.push_back(graphInputType(state, in));
    argNames.push_back(in.name());
  }
  OwningOpRef<ModuleOp> module = ModuleOp::create(FileLineColLoc::get(&context, path, 0, 0));
  (*module)->setAttr("cpc.source", state.builder.getStringAttr(path));
  (*module)->setAttr("cpc.opset", state.builder.getI64IntegerAttr(model.opset));
  state.builder.setInsertionPointToEnd(module->getBody());
  auto func = state.builder.create<func::FuncOp>(NameLoc::get(state.builder.getStringAttr(graph.name())),
                                                 "main", state.builder.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  for (size_t i = 0; i < argNames.size(); ++i) {
    func.setArgAttr(i, "cpc.name", state.builder.getStringAttr(argNames[i]));
    state.values[argNames[i]] = ImportedValue{entry->getArgument(i), nullptr,
                                              llvm::cast<RankedTensorType>(argTypes[i])};
  }
  state.builder.setInsertionPointToEnd(entry);

  for (int index = 0; index < graph.node_size(); ++index) {
    const onnx::NodeProto &node = graph.node(index);
    std::string where = describeNode(node, index);
    const Handler *handler = handlers().find(node.op_type(), model.opset); // checked above
    std::string locName = node.name().empty() ? node.op_type() + "#" + std::to_string(index) : node.name();
    NodeImporter importer(state, node, model.opset, NameLoc::get(state.builder.getStringAttr(locName)));
    try {
      (*handler)(importer);
    } catch (const NodeError &e) {
      state.fail(where + ": " + e.what());
    } catch (const ImportError &) {
      throw;
    } catch (const std::exception &e) {
      state.fail(where + ": " + e.what());
    }
    for (const auto &out : node.output())
      if (!out.empty() && !state.values.count(out))
        state.fail(where + ": produced no value for output '" + out + "'");
  }

  // Graph outputs become the function's results.
  SmallVector<Value> results;
  for (const auto &out : graph.output()) {
    if (!state.values.count(out.name()) && !state.parameters.count(out.name()))
      state.fail("graph output '" + out.name() + "' is never computed");
    ImportedValue &v = state.lookup(out.name());
    if (v.sequence)
      state.fail("graph output '" + out.name() + "' is a sequence; cpc's outputs are tensors");
    if (!v.value) {
      onnx::NodeProto none;
      NodeImporter materializer(state, none, model.opset, NameLoc::get(state.builder.getStringAttr(out.name())));
      v.value = materializer.constant(*v.host);
    }
    results.push_back(v.value);
  }
  state.builder.create<func::ReturnOp>(func.getLoc(), results);
  func.setFunctionType(state.builder.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (int i = 0; i < graph.output_size(); ++i)
    func.setResultAttr(i, "cpc.name", state.builder.getStringAttr(graph.output(i).name()));

  // Parameters were created where first used; list them at the top of the function.
  SmallVector<Operation *> params;
  for (auto p : entry->getOps<ParameterOp>())
    params.push_back(p);
  for (auto it = params.rbegin(); it != params.rend(); ++it)
    (*it)->moveBefore(&entry->front());

  std::string diagnostic;
  {
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      if (diagnostic.empty()) {
        std::string where;
        if (auto name = llvm::dyn_cast<NameLoc>(diag.getLocation()))
          where = "node '" + name.getName().str() + "': ";
        diagnostic = where + diag.str();
      }
      return success();
    });
    if (failed(verify(*module)))
      state.fail("imported IR does not verify: " + diagnostic);
    if (options.cleanup) {
      PassManager pm(&context);
      addImportCleanupPasses(pm);
      if (failed(pm.run(*module)))
        state.fail("clean-up passes failed: " + diagnostic);
    }
  }
  ImportedModel imported{std::move(module), makeWeightStore(model), {}, state.readBatchStatisticGroups};
  for (const std::string &warning : exportChangedModelWarnings(model, *imported.weights))
    imported.warnings.push_back(path + ": " + warning);
  return imported;
}

} // namespace cpc
