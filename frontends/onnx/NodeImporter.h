//===- NodeImporter.h - what an op handler sees of the import -------------===//
//
// One handler per ONNX op type (and opset range) turns a NodeProto into cpc ops, or folds it
// on the host when all its inputs are known constants. Handlers are registered in tables by
// the files under handlers/.
//
#ifndef CPC_FRONTENDS_ONNX_NODEIMPORTER_H
#define CPC_FRONTENDS_ONNX_NODEIMPORTER_H

#include "dialects/cpc/CpcDialect.h"
#include "frontends/onnx/ConstTensor.h"
#include "frontends/onnx/OpVersions.h"

#include "mlir/IR/Builders.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace cpc::onnx_import {

/// Constants up to this many elements are folded on the host; larger ones become IR.
constexpr int64_t kMaxFoldElements = 1 << 16;

struct ImportedValue;
using ImportedSequence = std::vector<ImportedValue>;

/// An ONNX value during import: an IR value, a host constant, or both; or a sequence of them
/// (SplitToSequence ... SequenceAt, which exporters write for chunk/split and which import
/// resolves to its elements: a sequence never reaches the IR).
struct ImportedValue {
  mlir::Value value;
  std::shared_ptr<const ConstTensor> host;
  mlir::RankedTensorType type;
  std::shared_ptr<const ImportedSequence> sequence;
};

/// Thrown by handlers; the driver prefixes the file and node.
struct NodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ImportState;

class NodeImporter {
public:
  NodeImporter(ImportState &state, const onnx::NodeProto &node, int opset, mlir::Location loc);

  const onnx::NodeProto &node() const { return node_; }
  int opset() const { return opset_; }
  mlir::OpBuilder &builder();
  mlir::Location loc() const { return loc_; }
  mlir::MLIRContext *context();
  /// The seed of a random op of this node: the import's seed, the node's identity (its first
  /// output's name, unique in the graph) and the node's own `seed` attribute, if any, mixed.
  int64_t randomStreamSeed();
  /// Groups of rows with batch statistics of their own (ImportOptions::batchStatisticGroups).
  int64_t batchStatisticGroups() const;

  // --- inputs -------------------------------------------------------------
  size_t numInputs() const { return node_.input_size(); }
  bool hasInput(size_t i) const { return i < numInputs() && !node_.input(i).empty(); }
  mlir::Value input(size_t i);
  mlir::RankedTensorType inputType(size_t i);
  std::vector<int64_t> inputShape(size_t i);
  /// Input i as a sequence; fails when it is a tensor.
  const ImportedSequence &inputSequence(size_t i);
  /// Input i as imported (tensor, constant or sequence), e.g. to pass it on unchanged.
  const ImportedValue &inputValue(size_t i);
  /// Host value of input i when it is a compile-time constant, else null.
  const ConstTensor *constInput(size_t i);
  /// Host value of input i; fails with "input i (what) must be a constant" otherwise.
  const ConstTensor &requireConstInput(size_t i, const std::string &what);
  /// The same, and it must hold exactly one element (a scalar operand such as Range's start).
  const ConstTensor &requireConstScalar(size_t i, const std::string &what);
  bool allInputsConstant();

  // --- attributes ---------------------------------------------------------
  bool hasAttr(const std::string &name) const;
  int64_t attrInt(const std::string &name, std::optional<int64_t> fallback = std::nullopt) const;
  double attrFloat(const std::string &name, std::optional<double> fallback = std::nullopt) const;
  std::string attrString(const std::string &name, std::optional<std::string> fallback = std::nullopt) const;
  std::vector<int64_t> attrInts(const std::string &name,
                                std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  const onnx::TensorProto &attrTensor(const std::string &name) const;
  /// Fails when the node carries an attribute other than `known`.
  void expectOnlyAttrs(std::initializer_list<const char *> known) const;

  // --- outputs ------------------------------------------------------------
  void setOutput(size_t i, mlir::Value value);
  void setOutput(size_t i, ConstTensor host);
  void setOutput(size_t i, const ImportedValue &value);
  /// An ImportedValue for an IR value or a host constant (for sequences' elements).
  ImportedValue imported(mlir::Value value);
  ImportedValue imported(ConstTensor host);

  // --- emitting IR --------------------------------------------------------
  /// Creates OpT with result types inferred by its shape rule; a rule failure becomes a
  /// NodeError with the rule's message (never a crash).
  template <typename OpT>
  mlir::Operation *emit(mlir::ValueRange operands, llvm::ArrayRef<mlir::NamedAttribute> attrs = {},
                        unsigned numResults = 1) {
    llvm::SmallVector<mlir::Type> placeholder(numResults, builder().getNoneType());
    auto op = builder().create<OpT>(loc_, placeholder, operands, attrs);
    llvm::SmallVector<mlir::Type> types;
    if (mlir::failed(inferWithDiagnostics([&](llvm::SmallVectorImpl<mlir::Type> &out) {
          return OpT::inferReturnTypes(context(), loc_, typename OpT::Adaptor(op), out);
        }, types))) {
      op->erase();
      failWithDiagnostic();
    }
    for (auto [result, type] : llvm::zip(op->getResults(), types))
      result.setType(type);
    return op.getOperation();
  }
  template <typename OpT>
  mlir::Value emit1(mlir::ValueRange operands, llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    return emit<OpT>(operands, attrs)->getResult(0);
  }
  /// Creates OpT with an explicit result type (reshape, broadcast, cast, ...).
  template <typename OpT>
  mlir::Value emitTyped(mlir::Type type, mlir::ValueRange operands,
                        llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    return builder().create<OpT>(loc_, mlir::TypeRange{type}, operands, attrs)->getResult(0);
  }

  mlir::Value constant(const ConstTensor &host);
  /// A rank-0 constant of `elementType` holding `value` (binary ops broadcast it).
  mlir::Value scalar(double value, mlir::Type elementType);
  /// The same for an exact integer (no round trip through double); fails when out of range.
  mlir::Value intScalar(int64_t value, mlir::Type elementType);
  mlir::Value reshape(mlir::Value v, llvm::ArrayRef<int64_t> shape);
  mlir::Value transpose(mlir::Value v, llvm::ArrayRef<int64_t> perm);
  mlir::NamedAttribute namedI64(const char *name, int64_t v);
  mlir::NamedAttribute namedI64s(const char *name, llvm::ArrayRef<int64_t> v);
  mlir::NamedAttribute namedF64(const char *name, double v);
  mlir::NamedAttribute namedBool(const char *name, bool v);
  mlir::NamedAttribute namedStr(const char *name, llvm::StringRef v);
  /// ScatterND's `reduction` ("none", "add", ...) as the dialect's enum; fails naming the node on
  /// a reduction cpc does not know.
  mlir::NamedAttribute namedScatterReduction(llvm::StringRef reduction);

  /// Maps an ONNX element type to MLIR; fails for types cpc does not support.
  mlir::Type elementType(int onnxType);
  /// Normalizes a possibly negative axis into [0, rank); fails when out of range.
  int64_t normalizeAxis(int64_t axis, int64_t rank) const;

  [[noreturn]] void fail(const std::string &message) const;

private:
  mlir::LogicalResult
  inferWithDiagnostics(const std::function<mlir::LogicalResult(llvm::SmallVectorImpl<mlir::Type> &)> &infer,
                       llvm::SmallVectorImpl<mlir::Type> &types);
  [[noreturn]] void failWithDiagnostic();

  ImportState &state_;
  const onnx::NodeProto &node_;
  int opset_;
  mlir::Location loc_;
  std::string lastDiagnostic_;
};

/// Handler registry: op type -> handlers, each for a range of the op's versions (the opsets at
/// which its definition changed, OpVersions.h). A model at opset N needs a handler whose range
/// holds the op's version in effect at N, so an op that changed at 18 is refused by a handler
/// written for version 13 until someone extends it; ops unchanged since stay served.
using Handler = std::function<void(NodeImporter &)>;
struct HandlerEntry {
  int minVersion;
  int maxVersion;
  Handler handler;
};
/// The definitions the handlers without an explicit range were written against.
constexpr int kBaseHandlerOpset = 17;
class HandlerRegistry {
public:
  void add(const std::string &opType, Handler handler, int minVersion = 1, int maxVersion = kBaseHandlerOpset) {
    table_[opType].push_back({minVersion, maxVersion, std::move(handler)});
  }
  const Handler *find(const std::string &opType, int opset) const;
  bool knows(const std::string &opType) const { return table_.count(opType); }

private:
  std::map<std::string, std::vector<HandlerEntry>> table_;
};

// Tables filled by handlers/*.cpp.
void registerElementwiseHandlers(HandlerRegistry &registry);
void registerShapeHandlers(HandlerRegistry &registry);
void registerNeuralHandlers(HandlerRegistry &registry);
void registerReductionHandlers(HandlerRegistry &registry);
void registerLossHandlers(HandlerRegistry &registry);
void registerSequenceHandlers(HandlerRegistry &registry);
void registerPoolingHandlers(HandlerRegistry &registry);
void registerResizeHandlers(HandlerRegistry &registry);

/// Fails unless `sizes` (Split's, SplitToSequence's) are >= 0 and add up to `dim`.
void checkSplitSizes(NodeImporter &n, const std::vector<int64_t> &sizes, int64_t dim);

} // namespace cpc::onnx_import

#endif
