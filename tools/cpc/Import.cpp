//===- Import.cpp - cpc import: ONNX -> cpc dialect MLIR ----------------===//
#include "dialects/cpc/CpcDialect.h"
#include "frontends/onnx/OnnxImporter.h"
#include "tools/cpc/Commands.h"
#include "tools/cpc/Flags.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace cpc::tools {

namespace {

const char *kImportUsage = R"(Usage: cpc import MODEL.onnx [options]

Options:
  -o FILE                    Write the MLIR to FILE instead of stdout
  --input-shape NAME=AxBxC   Static shape for a graph input with symbolic dims (repeatable)
  --frozen REGEX             Import matching parameters as frozen (not trainable; repeatable)
  --seed N                   The seed of the random ops (Dropout's masks; `cpc compile --seed`)
  --bn-groups G              Training BatchNorm: statistics over G groups of the batch's rows each
                             (what `cpc compile --dp G` imports without --sync-bn; default 1)
  --no-cleanup               Skip the clean-up passes (LayerNorm/GELU folding, canonicalize, CSE)
  --summary                  Print a summary (ops by kind, parameters, inputs, outputs, time)
                             instead of the IR
  --print-debuginfo          Print locations (ONNX node names) with the IR
)";

void printSummary(mlir::ModuleOp module, double seconds) {
  std::map<std::string, int> opCounts;
  int64_t trainable = 0, frozen = 0, numParams = 0;
  module.walk([&](mlir::Operation *op) {
    if (llvm::isa<mlir::ModuleOp, mlir::func::FuncOp, mlir::func::ReturnOp, cpc::VariableOp>(op))
      return;
    opCounts[op->getName().getStringRef().str()]++;
    if (auto p = llvm::dyn_cast<cpc::ParameterOp>(op)) {
      ++numParams;
      (p.getTrainable() ? trainable : frozen) += p.getType().getNumElements();
    }
  });
  auto func = *module.getOps<mlir::func::FuncOp>().begin();
  auto printType = [](mlir::Type t) {
    std::string s;
    llvm::raw_string_ostream os(s);
    t.print(os);
    return s;
  };
  std::cout << "function @" << func.getSymName().str() << "\n  inputs:\n";
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto name = func.getArgAttrOfType<mlir::StringAttr>(i, "cpc.name");
    std::cout << "    " << (name ? name.getValue().str() : "?") << ": " << printType(func.getArgument(i).getType()) << "\n";
  }
  std::cout << "  outputs:\n";
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto name = func.getResultAttrOfType<mlir::StringAttr>(i, "cpc.name");
    std::cout << "    " << (name ? name.getValue().str() : "?") << ": " << printType(func.getResultTypes()[i]) << "\n";
  }
  std::cout << "  parameters: " << numParams << " tensors, " << trainable << " trainable + " << frozen
            << " frozen elements\n  ops:\n";
  for (auto &[name, count] : opCounts)
    std::cout << "    " << name << ": " << count << "\n";
  std::cout << "  import time: " << seconds << " s\n";
}

} // namespace

int runImport(int argc, char **argv) {
  if (printedHelp(argc, argv, kImportUsage))
    return 0;
  namespace cl = llvm::cl;
  static cl::SubCommand sub("import", "Import an ONNX model into the cpc dialect");
  auto in = cl::sub(sub); // the flags, for this subcommand only (see Flags.h); kImportUsage describes them
  cl::list<std::string> positionals(cl::Positional, in, cl::desc("MODEL.onnx"));
  cl::opt<std::string> output("o", in);
  cl::list<std::string> inputShapes("input-shape", in), frozen("frozen", in);
  cl::opt<bool> noCleanup("no-cleanup", in), summary("summary", in), debugInfo("print-debuginfo", in);
  cl::opt<int64_t> seed("seed", in, cl::init(0)), bnGroups("bn-groups", in, cl::init(1));
  parseSubcommandFlags(argc, argv, sub);
  std::string input = onePositional(positionals, "import", "model");
  cpc::ImportOptions options;
  for (const std::string &shape : inputShapes)
    parseInputShapeFlag(shape, options);
  options.frozenPatterns.assign(frozen.begin(), frozen.end());
  options.cleanup = !noCleanup;
  if (seed < 0)
    throw UsageError("--seed expects a number >= 0, got " + std::to_string(seed));
  if (bnGroups < 1)
    throw UsageError("--bn-groups expects a number >= 1, got " + std::to_string(bnGroups));
  options.randomSeed = (uint64_t)seed.getValue();
  options.batchStatisticGroups = bnGroups;

  mlir::MLIRContext context;
  context.disableMultithreading(); // deterministic output, and no thread pool for one import
  auto start = std::chrono::steady_clock::now();
  cpc::ImportedModel model = cpc::importOnnxFile(context, input, options);
  for (const std::string &warning : model.warnings)
    std::cerr << "cpc: warning: " << warning << "\n";
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  std::error_code ec;
  std::unique_ptr<llvm::raw_fd_ostream> file;
  if (!output.empty()) {
    file = std::make_unique<llvm::raw_fd_ostream>(output, ec, llvm::sys::fs::OF_Text);
    if (ec)
      throw std::runtime_error(output + ": cannot write: " + ec.message());
  }
  if (summary) {
    printSummary(*model.module, seconds);
    if (!file)
      return 0;
  }
  llvm::raw_ostream &os = file ? *file : llvm::outs();
  mlir::OpPrintingFlags flags;
  if (debugInfo)
    flags.enableDebugInfo();
  model.module->print(os, flags);
  os << "\n";
  os.flush();
  if (file && file->has_error())
    throw std::runtime_error(output + ": write failed");
  return 0;
}

} // namespace cpc::tools
