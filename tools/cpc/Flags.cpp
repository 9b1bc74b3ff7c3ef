//===- Flags.cpp - parsing a subcommand's flags with llvm::cl --------------===//
#include "tools/cpc/Flags.h"
#include "tools/cpc/Commands.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/Path.h"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <functional>
#include <unistd.h>
#include <vector>

namespace cpc::tools {

namespace {

/// What `run` writes to stderr (llvm::cl reports there, unbuffered), instead of stderr.
std::string captureStderr(const std::function<void()> &run) {
  std::FILE *file = std::tmpfile();
  int saved = file ? dup(STDERR_FILENO) : -1;
  if (saved < 0) { // no temporary file: let the words go where they go
    run();
    return "";
  }
  llvm::errs().flush();
  dup2(fileno(file), STDERR_FILENO);
  run();
  llvm::errs().flush();
  dup2(saved, STDERR_FILENO);
  close(saved);
  std::string text;
  std::rewind(file);
  for (int c; (c = std::fgetc(file)) != EOF;)
    text.push_back((char)c);
  std::fclose(file);
  return text;
}


/// The name of a top-level option the command line set ("" when none). (These are libLLVM's
/// objects, built without RTTI: the sanitizer build compiles this file without UBSan's vptr check.)
std::string givenTopLevelOption() {
  for (const auto &entry : llvm::cl::getRegisteredOptions(llvm::cl::SubCommand::getTopLevel()))
    if (entry.second->getNumOccurrences())
      return entry.first().str();
  return "";
}

} // namespace

bool printedHelp(int argc, char **argv, const char *usage) {
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::cout << usage;
      return true;
    }
  return false;
}

void parseSubcommandFlags(int argc, char **argv, llvm::cl::SubCommand &subcommand) {
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) { os << "cpc (built on LLVM/MLIR " LLVM_VERSION_STRING ")\n"; });
  bool parsed = false;
  std::string errors = captureStderr([&] {
    parsed = llvm::cl::ParseCommandLineOptions(argc, argv, "", &llvm::errs(), nullptr,
                                               /*LongOptionsUseDoubleDash=*/true);
  });
  std::string help = "cpc " + subcommand.getName().str() + " --help";
  if (parsed && errors.empty()) {
    // llvm::cl falls back to the top level's options, where LLVM's libraries register theirs
    // (--crel, ...): none is a flag of cpc's.
    if (std::string given = givenTopLevelOption(); !given.empty())
      throw UsageError("Unknown command line argument '--" + given + "' (see " + help + ")");
    return;
  }
  // One line: llvm::cl starts each complaint with the program's name and puts a suggestion
  // ("Did you mean '--tp'?") on a line of its own.
  std::string program = llvm::sys::path::filename(argv[0]).str(), line;
  for (llvm::StringRef part : llvm::split(llvm::StringRef(errors).trim(), '\n')) {
    part = part.trim();
    for (const std::string &prefix : {program + " " + subcommand.getName().str() + ":", program + ":"})
      if (part.consume_front(prefix))
        part = part.trim();
    if (!part.empty())
      line += (line.empty() ? "" : " ") + part.str();
  }
  if (size_t at = line.find("Try: '"); at != std::string::npos) // "Try: 'ARGV0 --help'"
    if (size_t end = line.find("--help'", at); end != std::string::npos)
      line.replace(at, end + 7 - at, "(see " + help + ")");
  throw UsageError(line.empty() ? "bad flags (see " + help + ")" : line);
}

std::string onePositional(const llvm::cl::list<std::string> &positionals, const std::string &subcommand,
                          const std::string &noun) {
  if (positionals.empty())
    throw UsageError("'cpc " + subcommand + "' needs a " + noun + " file (see cpc " + subcommand + " --help)");
  if (positionals.size() > 1)
    throw UsageError("more than one " + noun + " given ('" + positionals[0] + "' and '" + positionals[1] + "')");
  return positionals[0];
}

} // namespace cpc::tools
