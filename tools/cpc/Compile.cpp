//===- Compile.cpp - cpc compile: ONNX -> execution plan ------------------===//
#include "compiler/PlanBuilder.h"
#include "tools/cpc/Commands.h"

#include "mlir/IR/MLIRContext.h"

#include <chrono>
#include <iostream>

namespace cpc::tools {

namespace {
const char *kCompileUsage = R"(Usage: cpc compile MODEL.onnx -o PLAN.bin [options]

Options:
  -o FILE                    Where to write the plan (required)
  --mode infer               What to compile: the forward computation of the graph
  --input-shape NAME=AxBxC   Static shape for a graph input with symbolic dims (repeatable)
  --frozen REGEX             Treat matching parameters as frozen (repeatable)
  --no-inplace               Never let an op write its result over an input
)";
} // namespace

int runCompile(int argc, char **argv) {
  std::string input, output, mode = "infer";
  ImportOptions importOptions;
  PlanOptions planOptions;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kCompileUsage;
      return 0;
    } else if (arg == "-o") {
      output = takeValue(argc, argv, i);
    } else if (arg == "--mode") {
      mode = takeValue(argc, argv, i);
    } else if (arg == "--no-inplace") {
      planOptions.inPlace = false;
    } else if (parseImportOption(argc, argv, i, importOptions)) {
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "' for 'cpc compile' (see cpc compile --help)");
    } else if (input.empty()) {
      input = arg;
    } else {
      throw UsageError("more than one model given ('" + input + "' and '" + arg + "')");
    }
  }
  if (input.empty())
    throw UsageError("'cpc compile' needs a model file (see cpc compile --help)");
  if (output.empty())
    throw UsageError("'cpc compile' needs -o PLAN.bin");
  if (mode != "infer")
    throw UsageError("--mode " + mode + " is not available; this cpc compiles --mode infer");
  planOptions.mode = mode;

  auto start = std::chrono::steady_clock::now();
  mlir::MLIRContext context;
  context.disableMultithreading();
  ImportedModel model = importOnnxFile(context, input, importOptions);
  Plan plan = buildPlan(*model.module, *model.weights, input, planOptions);
  writePlan(plan, output);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "compiled " << input << " -> " << output << ": " << plan.programs[0].steps.size() << " steps, arena "
            << plan.programs[0].arenaBytes << " B, predicted peak " << plan.predictedPeakBytes << " B ("
            << seconds << " s)\n";
  return 0;
}

} // namespace cpc::tools
