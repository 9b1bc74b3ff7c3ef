//===- OnnxImporter.h - ONNX model -> cpc dialect -------------------------===//
//
// The public face of the ONNX frontend. It includes no ONNX or protobuf headers so that
// tools and passes can use it with any flags.
//
#ifndef CPC_FRONTENDS_ONNX_ONNXIMPORTER_H
#define CPC_FRONTENDS_ONNX_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cpc {

/// A one-line, user-facing import error ("FILE: node 'n' (Op): what went wrong").
class ImportError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct ImportOptions {
  /// Static shapes for graph inputs whose dims are symbolic ("--input-shape NAME=2x3x224x224").
  std::map<std::string, std::vector<int64_t>> inputShapes;
  /// Parameters whose names match one of these regexes are imported as frozen.
  std::vector<std::string> frozenPatterns;
  /// The seed of the random ops the import makes (config key `seed`); each op mixes it with its
  /// own identity into the stream it draws (docs/random.md).
  uint64_t randomSeed = 0;
  /// Training-mode BatchNormalization computes its batch statistics over this many groups of
  /// rows each (the data-parallel ranks, as each rank's BatchNorm under DDP); 1: over the whole
  /// batch (SyncBatchNorm, `--sync-bn`, and one rank).
  int64_t batchStatisticGroups = 1;
  /// Run the clean-up pipeline (fold LayerNorm/GELU chains, canonicalize, CSE) after import.
  bool cleanup = true;
};

/// The initial values of a model's parameters, read from the model (or its external data)
/// when asked for; the IR refers to them by name.
class WeightStore {
public:
  virtual ~WeightStore() = default;
  virtual bool contains(const std::string &name) const = 0;
  /// Number of bytes of parameter `name` in its stored element type.
  virtual size_t byteSize(const std::string &name) const = 0;
  /// Copies the raw little-endian bytes of `name` into `dst` (byteSize bytes). Throws ImportError.
  virtual void read(const std::string &name, void *dst) const = 0;
};

struct ImportedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::shared_ptr<WeightStore> weights;
  /// One line each ("FILE: ..."): the model imports, but likely not as its author meant (an
  /// export that merged or folded parameters). Tools print them as warnings.
  std::vector<std::string> warnings;
  /// Whether the IR depends on ImportOptions::batchStatisticGroups (training-mode BatchNorm).
  bool dependsOnBatchStatisticGroups = false;
};

/// Loads, checks and imports the model at `path` (.onnx binary or .onnxtext text format) into a
/// module holding one `func.func @main`. Throws ImportError on any bad input.
ImportedModel importOnnxFile(mlir::MLIRContext &context, const std::string &path,
                             const ImportOptions &options = {});

/// Parses "NAME=2x3x224x224" into `options.inputShapes`; throws ImportError when malformed.
void parseInputShapeFlag(const std::string &flag, ImportOptions &options);

/// Registers the dialects the importer produces.
void registerImporterDialects(mlir::MLIRContext &context);

} // namespace cpc

#endif
