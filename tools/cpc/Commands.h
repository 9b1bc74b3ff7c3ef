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

/// Takes the value of option `argv[i]`, advancing i.
std::string takeValue(int argc, char **argv, int &i);

/// Consumes the import options shared by import and compile (--input-shape, --frozen);
/// returns false when argv[i] is not one of them.
bool parseImportOption(int argc, char **argv, int &i, ImportOptions &options);

int runImport(int argc, char **argv);
int runCompile(int argc, char **argv);
int runInspect(int argc, char **argv);

} // namespace cpc::tools

#endif
