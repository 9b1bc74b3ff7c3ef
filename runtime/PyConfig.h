//===- PyConfig.h - read a Colossal-AI config.py without running Python ---===//
//
// Colossal-AI's legacy launcher takes its training config as a Python file of top-level
// assignments (examples/mae/configs/mae_pretrain.py). cpc reads such a file as is, without a
// Python interpreter, into the JSON object TrainRecipe::apply takes. Only a safe, well-defined
// subset is read; anything else is refused with one line `PATH:LINE: <what> is not supported in
// a config file (...)` (a ConfigError), never run; text that is not Python gives
// `PATH:LINE: invalid syntax: ...`.
//
// The subset:
//  - statements: `NAME = expr`, `A = B = expr`, `NAME: type = expr` (the annotation is skipped),
//    `import a.b [as c]`, `from a.b import c, d as e` (the names are recorded, nothing is
//    imported), string expression statements (docstrings, ignored), comments, blank lines, `;`,
//    and continuation inside brackets and after a backslash;
//  - values: int (decimal, hex, octal, binary, with underscores; 64-bit), float, True, False,
//    None (JSON null), strings (all quote styles and escapes, r-strings, adjacent literals
//    concatenated, f-strings whose fields are expressions of this subset giving a string, a
//    number, a bool or None, without a format spec or conversion; floats print as Python's
//    repr), lists, tuples (JSON arrays), dicts with string keys, dict(k=v, ...),
//    unary + and -, + - * / // % ** on numbers with Python's semantics (bools count as ints),
//    + on two strings, two lists or two tuples, and parentheses;
//  - names: a name assigned earlier in the file is replaced by a copy of its value. A name bound
//    by an import, and a dotted name rooted at one, stands for itself as written: the string
//    of its dotted spelling, e.g. `AMP_TYPE.TORCH` -> "AMP_TYPE.TORCH" (what str() gives for
//    Colossal's enum members; TrainRecipe maps such strings). No arithmetic on such names.
//
// Names starting with `_` and imported names are not config keys (they may still be used in
// later values). Keys keep the file's order in parsePyConfigOrdered; nlohmann::json sorts them.
// Expressions nest at most 200 deep, and one value holds at most 2^16 elements.
//
#ifndef CPC_RUNTIME_PYCONFIG_H
#define CPC_RUNTIME_PYCONFIG_H

#include "runtime/TrainRecipe.h"

#include <nlohmann/json.hpp>

#include <string>

namespace cpc {

/// The config file at `path` as a JSON object of its top-level assignments; throws ConfigError.
nlohmann::json readPyConfig(const std::string &path);

/// The config `text` as a JSON object; `origin` names it in errors (`origin:LINE: ...`).
nlohmann::json parsePyConfig(const std::string &text, const std::string &origin);

/// As parsePyConfig, with the keys in the order the file first assigns them.
nlohmann::ordered_json parsePyConfigOrdered(const std::string &text, const std::string &origin);

} // namespace cpc

#endif // CPC_RUNTIME_PYCONFIG_H
