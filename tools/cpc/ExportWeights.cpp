//===- ExportWeights.cpp - cpc export-weights: its flags (the work is runtime/Checkpoint) ===//
#include "tools/cpc/Commands.h"
#include "runtime/Checkpoint.h"

#include <cstring>
#include <iostream>
#include <string>

namespace cpc::tools {

namespace {
const char *kExportUsage = R"(Usage: cpc export-weights CHECKPOINT -o MODEL.safetensors [--trainable-only]

Writes the trained parameters of a cpc-run checkpoint (a step-* directory, or the newest complete
one under a --checkpoint-dir) to a safetensors file, whole whatever layout trained them, under
the model's own names: the ONNX initializers', which are the PyTorch module's state-dict keys
(`model.load_state_dict(safetensors.torch.load_file(FILE))`).

Options:
  -o FILE            The safetensors file to write (required)
  --trainable-only   Leave out the parameters the run kept frozen
)";
} // namespace

int runExportWeights(int argc, char **argv) {
  std::string checkpoint, output;
  bool trainableOnly = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kExportUsage;
      return 0;
    }
    if (arg == "-o" || arg == "--output") {
      if (i + 1 >= argc)
        throw UsageError(arg + " needs a value");
      output = argv[++i];
    } else if (arg == "--trainable-only") {
      trainableOnly = true;
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("export-weights: unknown option '" + arg + "' (see cpc export-weights --help)");
    } else if (checkpoint.empty()) {
      checkpoint = arg;
    } else {
      throw UsageError("export-weights: more than one checkpoint given");
    }
  }
  if (checkpoint.empty() || output.empty())
    throw UsageError("export-weights needs a checkpoint and -o FILE (see cpc export-weights --help)");
  int count = exportCheckpointWeights(checkpoint, output, trainableOnly);
  std::cout << "wrote " << output << " (" << count << " parameters from " << findCheckpoint(checkpoint) << ")\n";
  return 0;
}

} // namespace cpc::tools
