//===- Main.cpp - the cpc driver: dispatch to subcommands -----------------===//
#include "tools/cpc/Commands.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>

namespace {
const char *kUsage = R"(cpc - compile ONNX training graphs into parallel plans

Usage: cpc <command> [options]

Commands:
  import MODEL.onnx          Import an ONNX model (binary .onnx or text .onnxtext) into the cpc
                             dialect and print it (or write it with -o)
  compile MODEL.onnx -o PLAN Compile a model into an execution plan for cpc-run
  inspect PLAN               Describe a plan: ranks, ops by kind, buffers, memory, inputs, outputs
                             (--schedule: each rank's communication and the no-hang check)
  plan MODEL.onnx --devices N
                             Rank every layout of the model on N devices by predicted step time
                             (cpc compile --auto --devices N compiles the first)
  calibrate -o PROFILE.json  Measure this machine's kernels and collectives into a cost profile
                             (cpc compile --profile prices plans with it)
  export-weights CHECKPOINT -o MODEL.safetensors
                             Write a cpc-run checkpoint's parameters, whole, under the model's
                             own names (PyTorch's state-dict keys)
  plot METRICS.jsonl [MORE.jsonl ...] -o OUT.png
                             Draw cpc-run --metrics files as a PNG: loss, lr, grad norm and
                             throughput over the steps, one line per file

Run 'cpc <command> --help' for the options of a command.
)";
} // namespace

int main(int argc, char **argv) {
  using namespace cpc::tools;
  std::map<std::string, std::function<int(int, char **)>> commands = {
      {"import", runImport}, {"compile", runCompile}, {"inspect", runInspect}, {"plan", runPlan}, {"calibrate", runCalibrate},
      {"export-weights", runExportWeights}, {"plot", runPlot}};
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? 1 : 0;
  }
  auto it = commands.find(argv[1]);
  try {
    if (it == commands.end())
      throw UsageError(std::string("unknown command '") + argv[1] + "' (see cpc --help)");
    return it->second(argc, argv);
  } catch (const std::exception &e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "cpc: error: " << message << "\n";
    return 1;
  }
}
