//===- PyConfigTest.cpp - Colossal-AI config.py files read without Python -===//
#include "runtime/PyConfig.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>

using namespace cpc;
using nlohmann::json;

namespace {

const char *const kMae = R"(from colossalai.amp import AMP_TYPE

# ViT Base
BATCH_SIZE = 32
TOTAL_BATCH_SIZE = 4096
LR = 1.5e-4
WEIGHT_DECAY = 0.05
NUM_EPOCHS = 800
WARMUP_EPOCHS = 40
fp16 = dict(mode=AMP_TYPE.TORCH)
gradient_accumulation = 2
clip_grad_norm = 1.0
parallel = dict(pipeline=1, tensor=dict(mode=None, size=1))
MODEL = "mae_vit_large_patch16"
NORM_PIX_LOSS = True
MASK_RATIO = 0.75
LOG_PATH = f"./output_{MODEL}"
)";

const char *const kWhy =
    " is not supported in a config file (cpc reads assignments of literals, dict(...) and arithmetic)";

json maeExpected() {
  return json::parse(R"({"BATCH_SIZE": 32, "TOTAL_BATCH_SIZE": 4096, "LR": 1.5e-4, "WEIGHT_DECAY": 0.05,
    "NUM_EPOCHS": 800, "WARMUP_EPOCHS": 40, "fp16": {"mode": "AMP_TYPE.TORCH"}, "gradient_accumulation": 2,
    "clip_grad_norm": 1.0, "parallel": {"pipeline": 1, "tensor": {"mode": null, "size": 1}},
    "MODEL": "mae_vit_large_patch16", "NORM_PIX_LOSS": true, "MASK_RATIO": 0.75,
    "LOG_PATH": "./output_mae_vit_large_patch16"})");
}

json parse(const std::string &text) { return parsePyConfig(text, "cfg.py"); }

/// The value of `x` in a one-assignment config.
json valueOf(const std::string &expr) { return parse("x = " + expr + "\n").at("x"); }

std::string errorOf(const std::string &text) {
  try {
    parse(text);
  } catch (const ConfigError &e) {
    return e.what();
  }
  return "(no error)";
}

// Tests that the MAE example reads to exactly its JSON: the enum member as its dotted name,
// None as null, the f-string with MODEL substituted, and the import not a key.
TEST(PyConfig, MaeExample) {
  json config = parse(kMae);
  EXPECT_EQ(config, maeExpected()) << config.dump();
  EXPECT_EQ(config["fp16"]["mode"], "AMP_TYPE.TORCH");
  EXPECT_TRUE(config["parallel"]["tensor"]["mode"].is_null());
  EXPECT_TRUE(config["NUM_EPOCHS"].is_number_integer());
  EXPECT_TRUE(config["clip_grad_norm"].is_number_float());
}

// Tests that the ordered form keeps the file's order of first assignment.
TEST(PyConfig, KeysKeepTheFileOrder) {
  nlohmann::ordered_json config = parsePyConfigOrdered(kMae, "cfg.py");
  std::vector<std::string> keys;
  for (const auto &item : config.items())
    keys.push_back(item.key());
  std::vector<std::string> want = {"BATCH_SIZE", "TOTAL_BATCH_SIZE", "LR", "WEIGHT_DECAY", "NUM_EPOCHS",
                                   "WARMUP_EPOCHS", "fp16", "gradient_accumulation", "clip_grad_norm",
                                   "parallel", "MODEL", "NORM_PIX_LOSS", "MASK_RATIO", "LOG_PATH"};
  EXPECT_EQ(keys, want);
  EXPECT_EQ(parsePyConfigOrdered("b = 1\na = 2\nb = 3\n", "o").dump(), R"({"b":3,"a":2})");
}

// Tests the example file the repository ships, read from disk: found from this source file's
// path (absolute, or relative to the build directory) or from the working directory up.
TEST(PyConfig, ShippedMaeConfigFile) {
  const std::string file = "examples/mae/configs/mae_pretrain.py", here = __FILE__;
  std::vector<std::string> roots = {here.substr(0, here.rfind("tests/unit/runtime/"))};
  for (std::string up; up.size() < 5 * 3; up += "../")
    roots.push_back(up);
  auto root =
      std::find_if(roots.begin(), roots.end(), [&](const std::string &r) { return bool(std::ifstream(r + file)); });
  if (root == roots.end())
    GTEST_SKIP() << "no source tree with " << file;
  EXPECT_EQ(readPyConfig(*root + file), maeExpected());
  EXPECT_THROW(readPyConfig(*root + "no/such/config.py"), ConfigError);
  EXPECT_THROW(readPyConfig(*root + "examples"), ConfigError); // a directory
}

TEST(PyConfig, NumbersAndConstants) {
  EXPECT_EQ(valueOf("1_000_000"), 1000000);
  EXPECT_EQ(valueOf("0xff"), 255);
  EXPECT_EQ(valueOf("0XFF_FF"), 65535);
  EXPECT_EQ(valueOf("0o17"), 15);
  EXPECT_EQ(valueOf("0b101"), 5);
  EXPECT_EQ(valueOf("000"), 0);
  EXPECT_EQ(valueOf("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(valueOf("1.5e-4"), 1.5e-4);
  EXPECT_EQ(valueOf(".5"), 0.5);
  EXPECT_EQ(valueOf("5."), 5.0);
  EXPECT_EQ(valueOf("1_0.2_5"), 10.25);
  EXPECT_EQ(valueOf("1E3"), 1000.0);
  EXPECT_EQ(valueOf("1e-400"), 0.0);
  EXPECT_TRUE(valueOf("1e3").is_number_float());
  EXPECT_EQ(valueOf("True"), true);
  EXPECT_EQ(valueOf("False"), false);
  EXPECT_TRUE(valueOf("None").is_null());
}

TEST(PyConfig, Strings) {
  EXPECT_EQ(valueOf("'single'"), "single");
  EXPECT_EQ(valueOf(R"("tab\there\nnl \"q\" \\ \x41\101\u00e9\U0001F600")"),
            "tab\there\nnl \"q\" \\ AA\u00e9\U0001F600");
  EXPECT_EQ(valueOf(R"('unknown \d escape')"), "unknown \\d escape");
  EXPECT_EQ(valueOf(R"(r'raw \n \d')"), "raw \\n \\d");
  EXPECT_EQ(valueOf("'''tri\nple''' \"\"\"two\"\"\""), "tri\npletwo");
  EXPECT_EQ(valueOf("'a' \"b\" 'c'"), "abc");
  EXPECT_EQ(valueOf("('one '\n     'two')"), "one two");
  EXPECT_EQ(valueOf("u'unicode é'"), "unicode é");
  EXPECT_EQ(valueOf("'line \\\ncontinued'"), "line continued");
  EXPECT_EQ(valueOf("'a' + 'b'"), "ab");
}

TEST(PyConfig, FStrings) {
  json c = parse("N = 3\nLR = 1.5e-4\nBIG = 1e16\nM = 'vit'\nT = True\nZ = None\nimport amp\n"
                 "a = f'{M}_{N + 1}_{LR}_{BIG}_{T}_{Z}_{2.0}'\n"
                 "b = f\"{{x}} {amp.O2} {'in'}\"\nc = f'''{\n  N\n}'''\n");
  EXPECT_EQ(c["a"], "vit_4_0.00015_1e+16_True_None_2.0");
  EXPECT_EQ(c["b"], "{x} amp.O2 in");
  EXPECT_EQ(c["c"], "3");
  EXPECT_EQ(valueOf("rf'\\d{1 + 1}' F'{-7 // 2}\\n'"), "\\d2-4\n");
}

TEST(PyConfig, Containers) {
  EXPECT_EQ(valueOf("[1, 'a', None, [2.5, True],]"), json::parse(R"([1, "a", null, [2.5, true]])"));
  EXPECT_EQ(valueOf("(1, 2)"), json::parse("[1, 2]"));
  EXPECT_EQ(valueOf("(1,)"), json::parse("[1]"));
  EXPECT_EQ(valueOf("()"), json::array());
  EXPECT_EQ(valueOf("[]"), json::array());
  EXPECT_EQ(valueOf("1, 2,"), json::parse("[1, 2]"));
  EXPECT_EQ(valueOf("(1)"), 1);
  EXPECT_EQ(valueOf("{'a': 1, \"b\": {'c': (0.9, 0.95)},}"), json::parse(R"({"a": 1, "b": {"c": [0.9, 0.95]}})"));
  EXPECT_EQ(valueOf("{'a': 1, 'a': 2}"), json::parse(R"({"a": 2})"));
  EXPECT_EQ(valueOf("{}"), json::object());
  EXPECT_EQ(valueOf("dict()"), json::object());
  EXPECT_EQ(valueOf("dict(a=1, b=dict(c=[1, 2]),)"), json::parse(R"({"a": 1, "b": {"c": [1, 2]}})"));
  EXPECT_EQ(valueOf("[1] + [2, 3]"), json::parse("[1, 2, 3]"));
  EXPECT_EQ(valueOf("(1,) + (2,)"), json::parse("[1, 2]"));
}

// Tests Python's semantics: true division, floor division and modulo toward -infinity, ** binding
// tighter than unary minus and to the right, bools as ints.
TEST(PyConfig, Arithmetic) {
  EXPECT_EQ(valueOf("1 + 2 * 3"), 7);
  EXPECT_EQ(valueOf("(1 + 2) * 3"), 9);
  EXPECT_EQ(valueOf("7 / 2"), 3.5);
  EXPECT_TRUE(valueOf("4 / 2").is_number_float());
  EXPECT_EQ(valueOf("7 // 2"), 3);
  EXPECT_EQ(valueOf("-7 // 2"), -4);
  EXPECT_EQ(valueOf("-7 % 3"), 2);
  EXPECT_EQ(valueOf("7 % -3"), -2);
  EXPECT_EQ(valueOf("7.5 // 2"), 3.0);
  EXPECT_EQ(valueOf("-7.5 % 2"), 0.5);
  EXPECT_EQ(valueOf("-7.5 // 2"), -4.0);
  EXPECT_EQ(valueOf("2 ** 10"), 1024);
  EXPECT_EQ(valueOf("2 ** -1"), 0.5);
  EXPECT_EQ(valueOf("-2 ** 2"), -4);
  EXPECT_EQ(valueOf("2 ** 3 ** 2"), 512);
  EXPECT_EQ(valueOf("(-8) ** 2"), 64);
  EXPECT_EQ(valueOf("-(-3)"), 3);
  EXPECT_EQ(valueOf("+-+3"), -3);
  EXPECT_EQ(valueOf("True + 1"), 2);
  EXPECT_EQ(valueOf("True + 1.5"), 2.5);
  EXPECT_EQ(valueOf("4096 // 256 * 1.5e-4"), 16 * 1.5e-4);
  EXPECT_EQ(valueOf("-9223372036854775807 - 1"), INT64_MIN);
  EXPECT_EQ(valueOf("(-9223372036854775807 - 1) % -1"), 0);
}

TEST(PyConfig, NamesImportsAndStatements) {
  json c = parse(R"("""A docstring."""
import os, torch.nn as nn
from colossalai.amp import AMP_TYPE as AMP, other
from . import sibling
from ..pkg.mod import (a_name,
                       b_name as b,)
import os.path
BASE = 2
_hidden = BASE * 10
A = B = _hidden + 1
C: int = A * 2
D: Dict[str, List[int]] | None = [BASE]
E: "forward"
BASE = 3
act = nn.ReLU; amp = AMP.O2; sep = os.path.sep
total = \
    A + \
    C  # a comment
items = [  # a comment in brackets
    BASE,

    D,
]
other = 'reassigned'
)");
  json want = json::parse(R"({"BASE": 3, "A": 21, "B": 21, "C": 42, "D": [2], "act": "nn.ReLU", "amp": "AMP.O2",
    "sep": "os.path.sep", "total": 63, "items": [3, [2]], "other": "reassigned"})");
  EXPECT_EQ(c, want) << c.dump();
  EXPECT_EQ(parse("x = 1\r\ny = [x,\r\n 2]\r\n"), json::parse(R"({"x": 1, "y": [1, 2]})"));
  EXPECT_EQ(parse("\xef\xbb\xbf# only a comment"), json::object());
}

/// The line and `what` of each refusal: `cfg.py:LINE: WHAT is not supported ...`.
TEST(PyConfig, RefusalsNameTheLine) {
  EXPECT_EQ(errorOf("a = 1\n\nprint(a)\n"), std::string("cfg.py:3: a call of 'print()'") + kWhy);
  struct Case {
    const char *text;
    const char *message;
  } cases[] = {
      {"x = 1\ndef f():\n    return 1\n", "cfg.py:2: 'def' (a function definition)"},
      {"class C:\n  pass\n", "cfg.py:1: 'class' (a class definition)"},
      {"x = 1\nif x:\n    y = 2\n", "cfg.py:2: 'if' (a conditional)"},
      {"for i in range(3):\n  pass\n", "cfg.py:1: 'for' (a loop or comprehension)"},
      {"while True:\n  pass\n", "cfg.py:1: 'while' (a loop)"},
      {"f = lambda: 1\n", "cfg.py:1: 'lambda' (a function)"},
      {"x = 1\ny = [\n  i for i in x]\n", "cfg.py:3: a comprehension ('for' inside brackets)"},
      {"x = {k: 1 for k in 'ab'}\n", "cfg.py:1: a comprehension ('for' inside brackets)"},
      {"x = 1 if True else 2\n", "cfg.py:1: 'if' (a conditional)"},
      {"x = y\n", "cfg.py:1: a reference to 'y' (a name not assigned earlier in the file)"},
      {"x = range(3)\n", "cfg.py:1: a call of 'range()'"},
      {"import torch\nx = torch.zeros(3)\n", "cfg.py:2: a call of the imported name 'torch.zeros'"},
      {"x = 'a'.upper()\n", "cfg.py:1: an attribute or method of a string"},
      {"x = [1]\ny = x[0]\n", "cfg.py:2: a subscript ('[...]' after a list)"},
      {"x = 1\nx += 1\n", "cfg.py:2: the augmented assignment '+='"},
      {"a, b = 1, 2\n", "cfg.py:1: unpacking (assigning to several names separated by commas)"},
      {"x = 1 == 1\n", "cfg.py:1: the operator '=='"},
      {"x = not True\n", "cfg.py:1: 'not' (a boolean operator)"},
      {"x = 'a' * 3\n", "cfg.py:1: '*' between a string and a number"},
      {"x = [1] + (2,)\n", "cfg.py:1: '+' between a list and a tuple"},
      {"import amp\nx = amp.O1 + 1\n", "cfg.py:2: '+' between the imported name 'amp.O1' and a number"},
      {"x = {1: 2}\n", "cfg.py:1: a dict key that is a number (JSON keys are strings)"},
      {"x = {1, 2}\n", "cfg.py:1: a set"},
      {"x = dict(1)\n", "cfg.py:1: an argument of dict() other than key=value"},
      {"x = dict(**y)\n", "cfg.py:1: '**' unpacking in dict()"},
      {"from os import *\n", "cfg.py:1: 'from ... import *'"},
      {"x = 1\n  y = 2\n", "cfg.py:2: an indented line (a block)"},
      {"x = 1j\n", "cfg.py:1: a complex number '1j'"},
      {"x = b'bytes'\n", "cfg.py:1: a bytes literal"},
      {"x = 99999999999999999999\n", "cfg.py:1: an integer beyond 64 bits ('99999999999999999999')"},
      {"x = 2 ** 64\n", "cfg.py:1: an integer result beyond 64 bits ('**' between a number and a number)"},
      {"x = 1e308 * 10\n", "cfg.py:1: a float result that is infinite or NaN ('*' between a number and a number)"},
      {"x = (-8) ** 0.5\n", "cfg.py:1: a negative number to a fractional power (a complex number)"},
      {"x = f'{1:.2f}'\n", "cfg.py:1: an f-string format spec ('{x:...}')"},
      {"x = f'{1!r}'\n", "cfg.py:1: an f-string conversion ('!r', '!s', '!a')"},
      {"x = f'{[1]}'\n", "cfg.py:1: a list inside an f-string"},
      {"x = 1\nx\n", "cfg.py:2: an expression statement (a value not assigned to a name)"},
      {"import a\na.b = 1\n", "cfg.py:2: an assignment to something other than a plain name"},
      {"x = ...\n", "cfg.py:1: the operator '...'"},
      {"x = 1\nλ = 2\n", "cfg.py:2: the non-ASCII character 'λ' outside a string"},
      {"x = 1 @ 2\n", "cfg.py:1: the operator '@'"},
      {"del x\n", "cfg.py:1: 'del' (a statement other than an assignment)"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(errorOf(c.text), std::string(c.message) + kWhy) << c.text;
}

TEST(PyConfig, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(errorOf("x = 1\ny = 'open\n"), "cfg.py:2: invalid syntax: a string that never ends on its line");
  EXPECT_EQ(errorOf("x = '''\n\nopen"), "cfg.py:1: invalid syntax: a string that never ends");
  EXPECT_EQ(errorOf("x = 1\ny = (1,\n 2\n"), "cfg.py:2: invalid syntax: '(' is never closed");
  EXPECT_EQ(errorOf("x = [1, 2)\n"), "cfg.py:1: invalid syntax: unmatched ')'");
  EXPECT_EQ(errorOf("x = 1)\n"), "cfg.py:1: invalid syntax: unmatched ')'");
  EXPECT_EQ(errorOf("x = \n"), "cfg.py:1: invalid syntax: the line ends inside a statement");
  EXPECT_EQ(errorOf("x = 1 / 0\n"), "cfg.py:1: division by zero ('/' between a number and a number)");
  EXPECT_EQ(errorOf("x = 012\n"), "cfg.py:1: invalid syntax: leading zeros in a decimal integer ('012')");
  EXPECT_EQ(errorOf("x = 1__0\n"), "cfg.py:1: invalid syntax: invalid number '1__0'");
  EXPECT_EQ(errorOf("x = dict(a=1, a=2)\n"), "cfg.py:1: invalid syntax: dict() is given 'a' twice");
  EXPECT_EQ(errorOf("x = '\\x4'\n"), "cfg.py:1: invalid syntax: a truncated \\x escape");
  EXPECT_EQ(errorOf("x = f'}'\n"), "cfg.py:1: invalid syntax: a single '}' in an f-string");
  EXPECT_EQ(errorOf("x = 1 $ 2\n"), "cfg.py:1: invalid syntax: unexpected character '$'");
  EXPECT_EQ(errorOf("x = 1\ny = '\xff'\n"), "cfg.py:2: the file is not valid UTF-8");
  EXPECT_EQ(errorOf(std::string("x = 1\ny = 2\0", 12)), "cfg.py:2: invalid syntax: a NUL byte");
}

// Tests that nesting and copying stop at their limits with an error, not a stack overflow.
TEST(PyConfig, LimitsStopRunawayInput) {
  auto nested = [](size_t n, const std::string &open, const std::string &inner, const std::string &close) {
    std::string s;
    for (size_t i = 0; i < n; ++i)
      s += open;
    s += inner;
    for (size_t i = 0; i < n; ++i)
      s += close;
    return s;
  };
  const std::string tooDeep = std::string("cfg.py:1: nesting deeper than 200 levels") + kWhy;
  EXPECT_EQ(errorOf("x = " + nested(100000, "(", "1", ")")), tooDeep); // the tokenizer stops it
  EXPECT_EQ(errorOf("x = " + nested(300, "[", "", "]")), tooDeep);
  EXPECT_EQ(errorOf("x: " + nested(300, "[", "", "]")), tooDeep);
  EXPECT_EQ(errorOf("x = " + std::string(10000, '-') + "1\n"), tooDeep); // the parser stops it
  EXPECT_EQ(errorOf("x = " + nested(150, "-(", "1", ")")), tooDeep);
  EXPECT_EQ(valueOf(nested(150, "[", "", "]")).dump(), nested(150, "[", "", "]"));
  EXPECT_EQ(parse("x: " + nested(150, "[", "", "]") + " = 1"), json::parse(R"({"x": 1})"));
  std::string doubling = "a = [1, 2, 3, 4]\n";
  for (int i = 0; i < 40; ++i)
    doubling += "a = [a, a]\n";
  EXPECT_NE(errorOf(doubling).find("a value too large"), std::string::npos) << errorOf(doubling);
  std::string strings = "s = 'abcdefgh'\n";
  for (int i = 0; i < 40; ++i)
    strings += "s = s + s\n";
  EXPECT_NE(errorOf(strings).find("a value too large"), std::string::npos) << errorOf(strings);
}

// Tests that random byte mutations of the MAE example each parse or give the one-line error.
TEST(PyConfig, MutatedInputParsesOrFailsInOneLine) {
  auto oneLine = [](const std::string &m) { // cfg.py:LINE: WHAT, on one line
    size_t digits = m.find_first_not_of("0123456789", 7);
    return m.rfind("cfg.py:", 0) == 0 && digits != std::string::npos && digits > 7 &&
           m.compare(digits, 2, ": ") == 0 && m.size() > digits + 2 && m.find('\n') == std::string::npos;
  };
  const char *const pieces[] = {"(", ")", "[", "{", "'", "\"\"\"", "\\", "\n", "  ", "#", "f'{", "}", "**",
                                "-", ".", ",", "=", ":", "0x", "1e", "\\x", "\xc3", "\xff", "dict(", "_"};
  std::mt19937 rng(1234);
  int parsed = 0;
  for (int round = 0; round < 400; ++round) {
    std::string text = kMae;
    int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % (text.size() + 1);
      switch (rng() % 4) {
      case 0: text.insert(at, 1, char(rng() % 256)); break;
      case 1: if (at < text.size()) text.erase(at, 1); break;
      case 2: if (at < text.size()) text[at] = char(rng() % 256); break;
      default: text.insert(at, pieces[rng() % (sizeof pieces / sizeof *pieces)]); break;
      }
    }
    try {
      parse(text).dump(); // dump() checks the strings are UTF-8
      ++parsed;
    } catch (const ConfigError &e) {
      EXPECT_TRUE(oneLine(e.what())) << e.what();
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 400);
}

} // namespace
