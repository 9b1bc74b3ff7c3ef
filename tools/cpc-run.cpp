//===- cpc-run.cpp - run a cpc plan ---------------------------------------===//
#include "runtime/Executor.h"
#include "runtime/TensorIO.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <sys/resource.h>
#include <sys/stat.h>

namespace {

const char *kUsage = R"(Usage: cpc-run PLAN.bin [options]

Options:
  --input NAME=FILE   Bind graph input NAME to FILE (.npy, or an ONNX TensorProto .pb); the file
                      holds the global batch. Inputs without --input get deterministic synthetic data.
  --output-dir DIR    Write one NAME.npy per graph output into DIR
  --threads T         Threads per rank for kernels (default 1)
  --steps N           Run the plan N times (default 1); prints the mean time per run
  --profile           Print the time spent per op kind
  --quiet             Print only errors
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string formatValues(const cpc::TensorRef &t, int64_t count) {
  std::ostringstream os;
  os << std::setprecision(7);
  int64_t n = std::min(count, t.numel());
  for (int64_t i = 0; i < n; ++i) {
    os << (i ? ", " : "");
    switch (t.dtype) {
    case cpc::DType::F32: os << t.as<float>()[i]; break;
    case cpc::DType::F64: os << t.as<double>()[i]; break;
    case cpc::DType::I64: os << t.as<int64_t>()[i]; break;
    case cpc::DType::I32: os << t.as<int32_t>()[i]; break;
    case cpc::DType::I1: case cpc::DType::U8: os << (int)t.as<uint8_t>()[i]; break;
    case cpc::DType::I8: os << (int)t.as<int8_t>()[i]; break;
    case cpc::DType::I16: os << t.as<int16_t>()[i]; break;
    default: os << "?"; break;
    }
  }
  if (t.numel() > n)
    os << ", ...";
  return os.str();
}

int run(int argc, char **argv) {
  std::string planPath, outputDir;
  std::vector<std::pair<std::string, std::string>> inputs;
  int threads = 1, steps = 1;
  bool quiet = false, profile = false;
  auto value = [&](int &i) -> std::string {
    if (i + 1 >= argc)
      throw UsageError(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  auto positive = [](const std::string &flag, const std::string &v) {
    char *end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 1 || n > 1 << 20)
      throw UsageError(flag + " expects a positive integer, got '" + v + "'");
    return (int)n;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--input") {
      std::string spec = value(i);
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        throw UsageError("--input expects NAME=FILE, got '" + spec + "'");
      inputs.push_back({spec.substr(0, eq), spec.substr(eq + 1)});
    } else if (arg == "--output-dir") {
      outputDir = value(i);
    } else if (arg == "--threads") {
      threads = positive(arg, value(i));
    } else if (arg == "--steps") {
      steps = positive(arg, value(i));
    } else if (arg == "--profile") {
      profile = true;
    } else if (arg == "--quiet") {
      quiet = true;
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "' (see cpc-run --help)");
    } else if (planPath.empty()) {
      planPath = arg;
    } else {
      throw UsageError("more than one plan given");
    }
  }
  if (planPath.empty())
    throw UsageError("needs a plan file (see cpc-run --help)");

  cpc::Plan plan = cpc::readPlan(planPath);
  cpc::Executor executor(plan, cpc::ExecutorOptions{0, threads, profile});
  for (const auto &[name, file] : inputs)
    executor.bindInput(name, cpc::readTensorFile(file));
  std::vector<std::string> synthetic = executor.unboundInputs();
  executor.bindSyntheticInputs();
  if (!quiet && !synthetic.empty()) {
    std::cout << "synthetic data for:";
    for (const auto &n : synthetic)
      std::cout << " " << n;
    std::cout << "\n";
  }

  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s)
    executor.run();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  if (!outputDir.empty()) {
    mkdir(outputDir.c_str(), 0755);
    struct stat st;
    if (stat(outputDir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw cpc::RuntimeError(outputDir + ": cannot create the output directory");
  }
  for (const auto &out : executor.outputs()) {
    cpc::TensorRef t = executor.output(out.name);
    if (!quiet)
      std::cout << out.name << ": " << cpc::dtypeName(t.dtype) << cpc::shapeString(t.shape) << " = ["
                << formatValues(t, 8) << "]\n";
    if (!outputDir.empty())
      cpc::writeNpy(outputDir + "/" + out.name + ".npy", t);
  }
  if (!quiet) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    cpc::MemoryStats mem = executor.memoryStats();
    std::cout << "time: " << seconds / steps * 1e3 << " ms per run (" << steps << " run" << (steps > 1 ? "s" : "")
              << ", " << threads << " thread" << (threads > 1 ? "s" : "") << ")\n"
              << "memory: predicted peak " << plan.predictedPeakBytes << " B, allocated " << mem.total()
              << " B (arena " << mem.arenaBytes << ", parameters " << mem.parameterBytes << ", constants "
              << mem.constantBytes << ", inputs " << mem.inputBytes << "), max RSS " << usage.ru_maxrss * 1024
              << " B\n";
  }
  if (profile) {
    double total = 0;
    for (const auto &[op, secs] : executor.profile())
      total += secs;
    std::cout << "profile (all runs):\n";
    for (const auto &[op, secs] : executor.profile())
      std::cout << "  " << std::setw(24) << std::left << op << std::right << std::fixed << std::setprecision(2)
                << std::setw(10) << secs * 1e3 << " ms " << std::setw(6) << 100 * secs / total << "%\n";
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::string message = e.what();
    std::replace(message.begin(), message.end(), '\n', ' ');
    std::cerr << "cpc-run: error: " << message << "\n";
    return 1;
  }
}
