//===- ImportCache.cpp - one import of a model for many compiles -------------===//

#include "compiler/ImportCache.h"

#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <stdexcept>

namespace cpc {
namespace {

/// What an import depends on, as one string, but the BatchNorm groups (most models have none).
std::string keyOf(const std::string &path, const ImportOptions &options) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << path << '\0' << options.randomSeed << '\0' << options.cleanup;
  for (const auto &[name, dims] : options.inputShapes) {
    os << '\0' << name << '=';
    for (int64_t d : dims)
      os << d << 'x';
  }
  for (const std::string &pattern : options.frozenPatterns)
    os << '\0' << pattern;
  return key;
}

} // namespace

ImportedModel ImportCache::import(mlir::MLIRContext &context, const std::string &path, const ImportOptions &options) {
  std::string key = keyOf(path, options);
  std::unique_lock<std::mutex> lock(mutex_); // held through an import: one import per key
  for (const Entry &found : entries_) {
    if (found.key != key || (found.dependsOnGroups && found.batchStatisticGroups != options.batchStatisticGroups))
      continue;
    Entry entry = found; // parsed without the lock: compiles on other threads parse theirs
    lock.unlock();
    registerImporterDialects(context);
    ImportedModel model;
    model.module = mlir::parseSourceString<mlir::ModuleOp>(entry.bytecode, mlir::ParserConfig(&context));
    if (!model.module) // the bytecode this process wrote: not a user's error
      throw std::logic_error(path + ": the cached import does not parse back");
    model.weights = entry.weights;
    model.warnings = entry.warnings;
    model.dependsOnBatchStatisticGroups = entry.dependsOnGroups;
    return model;
  }
  ImportedModel model = importOnnxFile(context, path, options);
  Entry entry{key, "", options.batchStatisticGroups, model.dependsOnBatchStatisticGroups, model.weights, model.warnings};
  llvm::raw_string_ostream os(entry.bytecode);
  if (mlir::failed(mlir::writeBytecodeToFile(*model.module, os)))
    throw std::logic_error(path + ": the import does not write as bytecode");
  os.flush();
  entries_.push_back(std::move(entry));
  return model;
}

} // namespace cpc
