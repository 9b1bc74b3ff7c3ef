# lit configuration for cpc: runs the tools from build/bin under FileCheck.
import os
import lit.formats

config.name = "cpc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".onnxtext", ".td"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.cpc_binary_dir, "tests", "lit")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]

config.environment["PATH"] = os.pathsep.join(
    [config.cpc_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
for tool in ["FileCheck", "not", "count"]:
    config.substitutions.append((r"\b%s\b" % tool, os.path.join(config.llvm_tools_dir, tool)))
config.substitutions.append(("%mlir_include", config.mlir_include_dir))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
