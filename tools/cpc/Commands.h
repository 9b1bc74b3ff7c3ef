//===- Commands.h - the subcommands of the cpc driver ---------------------===//
#ifndef CPC_TOOLS_CPC_COMMANDS_H
#define CPC_TOOLS_CPC_COMMANDS_H

#include "frontends/onnx/OnnxImporter.h"

#include <stdexcept>
#include <string>

namespace cpc::tools {

/// A wrong command line; reported as one line, exit code 1.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int runImport(int argc, char **argv);
int runCompile(int argc, char **argv);
int runInspect(int argc, char **argv);
int runCalibrate(int argc, char **argv);
int runPlan(int argc, char **argv);
int runExportWeights(int argc, char **argv);
int runPlot(int argc, char **argv);

} // namespace cpc::tools

#endif
