//===- Flags.h - llvm::cl parsers and parsing for cpc's subcommands --------===//
//
// Each subcommand declares its flags as llvm::cl options of its own llvm::cl::SubCommand, local
// to its run function, and parses with parseSubcommandFlags. Values are parsed
// into their types where they are read: a number of ranks, an enum from its cases' names, with
// one line naming the flag, what it expects and what it got.
//
#ifndef CPC_TOOLS_CPC_FLAGS_H
#define CPC_TOOLS_CPC_FLAGS_H

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>

namespace cpc::tools {

/// A count in [1, 4096] (ranks, stages, microbatches): the value of a cl::opt<Count>.
struct Count {
  int64_t value = 0;
  bool operator==(const Count &other) const { return value == other.value; }
  bool operator!=(const Count &other) const { return value != other.value; }
};

/// An enum from its cases' names (clEnumValN): a wrong one is refused naming every case.
template <class E> class ChoiceParser : public llvm::cl::parser<E> {
public:
  explicit ChoiceParser(llvm::cl::Option &o) : llvm::cl::parser<E>(o) {}
  bool parse(llvm::cl::Option &o, llvm::StringRef, llvm::StringRef arg, E &value) {
    std::string choices;
    for (unsigned i = 0, n = this->getNumOptions(); i < n; ++i) {
      if (arg == this->getOption(i)) {
        value = this->Values[i].V.getValue();
        return false;
      }
      choices += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + this->getOption(i).str();
    }
    return o.error("expects " + choices + ", got '" + arg + "'");
  }
};

} // namespace cpc::tools

/// cl::opt<Count>'s parser: a wrong count is refused naming the flag.
template <> class llvm::cl::parser<cpc::tools::Count> : public llvm::cl::basic_parser<cpc::tools::Count> {
public:
  explicit parser(Option &o) : basic_parser(o) {}
  bool parse(Option &o, StringRef, StringRef arg, cpc::tools::Count &count) {
    if (arg.getAsInteger(10, count.value) || count.value < 1 || count.value > 4096)
      return o.error("expects a positive number, got '" + arg + "'");
    return false;
  }
  StringRef getValueName() const override { return "N"; }
  void printOptionDiff(const Option &o, cpc::tools::Count count, OptVal, size_t width) const {
    printOptionName(o, width);
    llvm::outs() << "= " << count.value << "\n";
  }
};

namespace cpc::tools {

/// Prints `usage` when ARGS hold --help or -h (cpc's own help text, not llvm::cl's list).
bool printedHelp(int argc, char **argv, const char *usage);

/// Parses `cpc SUBCOMMAND ARGS...` into the options of `subcommand` (an llvm::cl::SubCommand of
/// that name: llvm::cl then sees neither LLVM's own global options nor another subcommand's);
/// a bad flag throws UsageError with llvm::cl's words in one line ("for the --tp option:
/// expects a positive number, got '0'"), which cpc prints as "cpc: error: ...".
void parseSubcommandFlags(int argc, char **argv, llvm::cl::SubCommand &subcommand);

/// The one positional argument of a subcommand, a `noun` file ("model", "plan"), named when it
/// is missing or given twice.
std::string onePositional(const llvm::cl::list<std::string> &positionals, const std::string &subcommand,
                          const std::string &noun);

} // namespace cpc::tools

#endif
