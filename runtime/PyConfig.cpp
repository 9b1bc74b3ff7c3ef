//===- PyConfig.cpp - a Colossal-AI config.py read as data ----------------===//
//
// A tokenizer (the whole text to tokens; logical lines end in Newline) and a recursive-descent
// parser that evaluates as it reads. See PyConfig.h for the subset read.
// Over 800 lines: one reader of one format (Python's tokens, expressions and literal, f-string and
// arithmetic rules); split, each part would have to export its internals to the others.
//
#include "runtime/PyConfig.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <vector>

namespace cpc {
namespace {

using OJson = nlohmann::ordered_json;

constexpr int kMaxDepth = 200;                 // Python's own parser stops near 200 brackets
constexpr size_t kMaxWeight = size_t(1) << 16; // elements in one value: copies of names could explode
constexpr size_t kMaxTotal = size_t(1) << 20;  // elements bound over the whole file
const char *const kWhy =
    " is not supported in a config file (cpc reads assignments of literals, dict(...) and arithmetic)";

/// `text` fit for a one-line message: control characters escaped, long text cut.
std::string show(const std::string &text) {
  std::string out;
  for (unsigned char c : text.substr(0, 40)) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += (c < 0x20 || c == 0x7f) ? std::string(buf) : std::string(1, char(c));
  }
  return text.size() > 40 ? out + "..." : out;
}

[[noreturn]] void fail(const std::string &origin, int line, const std::string &msg) {
  throw ConfigError(origin + ":" + std::to_string(line) + ": " + msg);
}
[[noreturn]] void unsupported(const std::string &origin, int line, const std::string &what) {
  fail(origin, line, what + kWhy);
}

/// Python's keywords and, for the refusal, what each starts (empty: a statement of its own).
const std::map<std::string, std::string> &keywords() {
  static const std::map<std::string, std::string> k = {
      {"def", "a function definition"}, {"class", "a class definition"}, {"lambda", "a function"},
      {"if", "a conditional"}, {"elif", "a conditional"}, {"else", "a conditional"}, {"while", "a loop"},
      {"for", "a loop or comprehension"}, {"with", "a context manager"}, {"try", "exception handling"},
      {"and", "a boolean operator"}, {"or", "a boolean operator"}, {"not", "a boolean operator"},
      {"in", "a comparison"}, {"is", "a comparison"}, {"False", ""}, {"None", ""}, {"True", ""}, {"as", ""},
      {"assert", ""}, {"async", ""}, {"await", ""}, {"break", ""}, {"continue", ""}, {"del", ""}, {"except", ""},
      {"finally", ""}, {"from", ""}, {"global", ""}, {"import", ""}, {"nonlocal", ""}, {"pass", ""}, {"raise", ""},
      {"return", ""}, {"yield", ""}};
  return k;
}
bool isKeyword(const std::string &word) { return keywords().count(word) != 0; }

enum class Tok { Name, Int, Float, Str, Op, Indent, Newline, End };

struct Token {
  Tok kind;
  std::string text; // a name, an operator, or a string's body as written (escapes not decoded)
  int line;
  int64_t i = 0;
  double f = 0;
  bool raw = false, fstr = false;
};

/// `+=` and the like (not `==`, `<=`, `>=`, `!=`, `:=`).
bool isAugmented(const Token &tk) {
  static const std::set<std::string> cmp = {"==", "!=", "<=", ">=", ":="};
  return tk.kind == Tok::Op && tk.text.size() >= 2 && tk.text.back() == '=' && !cmp.count(tk.text);
}

bool isIdentChar(char c) { return std::isalnum((unsigned char)c) || c == '_'; }
bool isDigit(char c) { return std::isdigit((unsigned char)c) != 0; }

/// Underscores only between two digits (or right after a base prefix such as 0x).
bool underscoresOk(const std::string &lit, bool prefixed) {
  auto digit = [&](char c) { return prefixed ? std::isxdigit((unsigned char)c) != 0 : isDigit(c); };
  for (size_t i = 0; i < lit.size(); ++i)
    if (lit[i] == '_' && (i + 1 >= lit.size() || !digit(lit[i + 1]) || !(digit(lit[i - 1]) || (prefixed && i == 2))))
      return false;
  return true;
}

/// The whole text to tokens. Newlines inside brackets and after a backslash join lines.
class Lexer {
public:
  Lexer(const std::string &text, const std::string &origin, int line) : s(text), origin(origin), line(line) {}

  std::vector<Token> run() {
    startLine();
    while (p < s.size()) {
      char c = s[p];
      if (c == ' ' || c == '\t' || c == '\f') {
        ++p;
      } else if (c == '#') {
        p = std::min(s.find('\n', p), s.size());
      } else if (c == '\n') {
        newline();
      } else if (c == '\\') {
        if (at(1) != '\n')
          fail(origin, line, "invalid syntax: a backslash outside a string that does not end the line");
        p += 2, ++line;
      } else if (isDigit(c) || (c == '.' && isDigit(at(1)))) {
        number();
      } else if (std::isalpha((unsigned char)c) || c == '_') {
        size_t b = p;
        while (isIdentChar(at(0)))
          ++p;
        std::string word = s.substr(b, p - b), lower = word;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](char ch) { return std::tolower(ch); });
        static const std::set<std::string> prefixes = {"r", "u", "f", "b", "br", "rb", "fr", "rf"};
        if ((at(0) == '"' || at(0) == '\'') && prefixes.count(lower))
          string(lower);
        else
          out.push_back(Token{Tok::Name, word, line});
      } else if (c == '"' || c == '\'') {
        string("");
      } else {
        op();
      }
    }
    if (!open.empty())
      fail(origin, open.back().second, std::string("invalid syntax: '") + open.back().first + "' is never closed");
    if (!out.empty() && out.back().kind != Tok::Newline)
      out.push_back(Token{Tok::Newline, "", line});
    out.push_back(Token{Tok::End, "", line});
    return std::move(out);
  }

private:
  const std::string &s;
  const std::string &origin;
  int line;
  size_t p = 0;
  std::vector<std::pair<char, int>> open; // unclosed brackets and their lines
  std::vector<Token> out;

  char at(size_t k) const { return p + k < s.size() ? s[p + k] : '\0'; }

  void newline() {
    ++p;
    if (open.empty() && !out.empty() && out.back().kind != Tok::Newline)
      out.push_back(Token{Tok::Newline, "", line});
    ++line;
    if (open.empty())
      startLine();
  }

  // A statement never starts indented (block statements are refused); the parser says so in turn.
  void startLine() {
    size_t b = p;
    while (at(0) == ' ' || at(0) == '\t' || at(0) == '\f')
      ++p;
    if (p > b && p < s.size() && s[p] != '#' && s[p] != '\n')
      out.push_back(Token{Tok::Indent, "", line});
  }

  void number() {
    size_t b = p;
    char x = char(std::tolower((unsigned char)at(1)));
    int base = at(0) == '0' && (x == 'x' || x == 'o' || x == 'b') ? (x == 'x' ? 16 : x == 'o' ? 8 : 2) : 10;
    auto digits = [&](bool hex) {
      while ((hex ? std::isxdigit((unsigned char)at(0)) != 0 : isDigit(at(0))) || at(0) == '_')
        ++p;
    };
    bool isFloat = false;
    if (base != 10) {
      p += 2, digits(true);
    } else {
      digits(false);
      if (at(0) == '.')
        ++p, isFloat = true, digits(false);
      bool sign = at(1) == '+' || at(1) == '-';
      if ((at(0) == 'e' || at(0) == 'E') && isDigit(at(sign ? 2 : 1)))
        p += sign ? 2 : 1, isFloat = true, digits(false);
    }
    std::string lit = s.substr(b, p - b), clean;
    if (at(0) == 'j' || at(0) == 'J')
      unsupported(origin, line, "a complex number '" + show(lit) + "j'");
    bool glued = isIdentChar(at(0)); // a letter or digit right after the number, as in 1x or 0b12
    if (glued || !underscoresOk(lit, base != 10) || (base != 10 && lit.size() == 2))
      fail(origin, line, "invalid syntax: invalid number '" + show(s.substr(b, p - b + glued)) + "'");
    std::remove_copy(lit.begin() + (base == 10 ? 0 : 2), lit.end(), std::back_inserter(clean), '_');
    Token t{isFloat ? Tok::Float : Tok::Int, lit, line};
    const char *end = clean.data() + clean.size();
    if (isFloat) {
      if (std::from_chars(clean.data(), end, t.f).ec == std::errc::result_out_of_range)
        t.f = std::strtod(clean.c_str(), nullptr); // underflow to 0 or a subnormal, as in Python
      if (!std::isfinite(t.f))
        unsupported(origin, line, "a float too large for a double ('" + show(lit) + "')");
    } else {
      if (base == 10 && clean.size() > 1 && clean[0] == '0' && clean.find_first_not_of('0') != std::string::npos)
        fail(origin, line, "invalid syntax: leading zeros in a decimal integer ('" + show(lit) + "')");
      auto r = std::from_chars(clean.data(), end, t.i, base);
      if (r.ec == std::errc::result_out_of_range)
        unsupported(origin, line, "an integer beyond 64 bits ('" + show(lit) + "')");
      if (r.ec != std::errc() || r.ptr != end)
        fail(origin, line, "invalid syntax: invalid number '" + show(lit) + "'");
    }
    out.push_back(t);
  }

  void string(const std::string &prefix) {
    if (prefix.find('b') != std::string::npos)
      unsupported(origin, line, "a bytes literal");
    char q = s[p];
    bool triple = at(1) == q && at(2) == q;
    p += triple ? 3 : 1;
    Token t{Tok::Str, "", line};
    size_t b = p;
    for (;;) {
      if (p >= s.size() || (s[p] == '\\' && p + 1 >= s.size()))
        fail(origin, t.line, "invalid syntax: a string that never ends");
      if (s[p] == '\n' && !triple)
        fail(origin, t.line, "invalid syntax: a string that never ends on its line");
      if (s[p] == q && (!triple || (at(1) == q && at(2) == q)))
        break;
      size_t n = s[p] == '\\' ? 2 : 1; // a backslash keeps the next character, even in a raw string
      line += int(std::count(s.begin() + long(p), s.begin() + long(p + n), '\n'));
      p += n;
    }
    t.text = s.substr(b, p - b);
    t.raw = prefix.find('r') != std::string::npos;
    t.fstr = prefix.find('f') != std::string::npos;
    out.push_back(t);
    p += triple ? 3 : 1;
  }

  void op() {
    // Longest first, so that "**=" is not read as "**" then "=".
    static const char *const ops[] = {"**=", "//=", ">>=", "<<=", "...", "->", ":=", "**", "//", "==", "!=", "<=",
                                      ">=", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "+",
                                      "-", "*", "/", "%", "@", "&", "|", "^", "~", "<", ">", "(", ")", "[", "]",
                                      "{", "}", ",", ":", ".", ";", "="};
    for (const char *o : ops) {
      size_t n = std::strlen(o);
      if (o[0] != s[p] || s.compare(p, n, o) != 0)
        continue;
      if (n == 1 && std::strchr("([{", o[0])) {
        if (open.size() >= size_t(kMaxDepth)) // as Python's tokenizer: "too many nested parentheses"
          unsupported(origin, line, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
        open.push_back({o[0], line});
      } else if (n == 1 && std::strchr(")]}", o[0])) {
        if (open.empty() || std::string("([{").find(open.back().first) != std::string(")]}").find(o[0]))
          fail(origin, line, std::string("invalid syntax: unmatched '") + o + "'");
        open.pop_back();
      }
      out.push_back(Token{Tok::Op, o, line});
      p += n;
      return;
    }
    unsigned char c = (unsigned char)s[p];
    if (c >= 0x80) // one whole UTF-8 character: the text was checked to be UTF-8
      unsupported(origin, line, "the non-ASCII character '" + s.substr(p, c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2) +
                                    "' outside a string");
    fail(origin, line, "invalid syntax: unexpected character '" + show(std::string(1, char(c))) + "'");
  }
};

void appendUtf8(std::string &out, uint32_t cp) {
  int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  static const unsigned char lead[] = {0, 0, 0xc0, 0xe0, 0xf0};
  out += char(n == 1 ? cp : lead[n] | (cp >> (6 * (n - 1))));
  for (int k = n - 2; k >= 0; --k)
    out += char(0x80 | ((cp >> (6 * k)) & 0x3f));
}

/// A non-raw string body with Python's escapes decoded (unknown escapes stay, as in Python).
std::string decodeEscapes(const std::string &body, const std::string &origin, int line) {
  static const std::map<char, char> simple = {{'\\', '\\'}, {'\'', '\''}, {'"', '"'}, {'a', '\a'}, {'b', '\b'},
                                              {'f', '\f'},  {'n', '\n'},  {'r', '\r'}, {'t', '\t'}, {'v', '\v'}};
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = i + 1 < body.size() && body[i] == '\\' ? body[++i] : '\0';
    size_t n = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0, octal = 0;
    if (c == '\0') {
      out += body[i];
    } else if (simple.count(c) || c == '\n') { // a backslash-newline joins lines
      out += c == '\n' ? "" : std::string(1, simple.at(c));
    } else if (c >= '0' && c <= '7') {
      while (octal < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7')
        ++octal, ++i;
      appendUtf8(out, uint32_t(std::stoul(body.substr(i - octal, octal), nullptr, 8)));
      --i;
    } else if (n) {
      std::string hex = body.substr(i + 1, n);
      if (hex.size() != n || hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
        fail(origin, line, std::string("invalid syntax: a truncated \\") + c + " escape");
      uint32_t v = uint32_t(std::stoul(hex, nullptr, 16));
      if (v > 0x10ffff || (v >= 0xd800 && v < 0xe000))
        unsupported(origin, line, "the escape '\\" + std::string(1, c) + hex + "' (not a character UTF-8 can hold)");
      appendUtf8(out, v), i += n;
    } else if (c == 'N') {
      unsupported(origin, line, "a named escape ('\\N{...}')");
    } else {
      out += '\\', out += c;
    }
  }
  return out;
}

/// Python's repr() of a float: the shortest digits, fixed notation for exponents in [-4, 16).
std::string pyFloat(double d) {
  if (d == 0)
    return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  std::string sci(buf, std::to_chars(buf, buf + sizeof buf, std::fabs(d), std::chars_format::scientific).ptr);
  size_t e = sci.find('e');
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits = sci.substr(0, e), out;
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  size_t whole = size_t(std::max(exp + 1, 0));
  if (exp >= 16 || exp < -4) {
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "") + buf;
  } else if (exp < 0) {
    out = "0." + std::string(size_t(-exp - 1), '0') + digits;
  } else {
    digits.resize(std::max(digits.size(), whole + 1), '0');
    out = digits.substr(0, whole) + "." + digits.substr(whole);
  }
  return (d < 0 ? "-" : "") + out;
}

/// A value as the parser carries it: the JSON plus what JSON forgets.
struct Value {
  OJson j;
  bool tuple = false;  // an array written as a tuple (a list + a tuple is refused, as in Python)
  bool symbol = false; // an imported name or a dotted name rooted at one
  size_t weight = 1;   // elements (and characters / 16) held, bounding copies
};

Value text(std::string s) {
  size_t w = 1 + s.size() / 16;
  return Value{OJson(std::move(s)), false, false, w};
}

std::string typeName(const Value &v) {
  if (v.symbol)
    return "the imported name '" + show(v.j.get<std::string>()) + "'";
  switch (v.j.type()) {
  case OJson::value_t::null: return "None";
  case OJson::value_t::boolean: return "a bool";
  case OJson::value_t::string: return "a string";
  case OJson::value_t::array: return v.tuple ? "a tuple" : "a list";
  case OJson::value_t::object: return "a dict";
  default: return "a number";
  }
}

bool isNumber(const OJson &j) { return j.is_number() || j.is_boolean(); }
bool isInt(const OJson &j) { return j.is_boolean() || j.is_number_integer(); }
double asDouble(const OJson &j) { return j.is_boolean() ? double(j.get<bool>()) : j.get<double>(); }
int64_t asInt(const OJson &j) { return j.is_boolean() ? int64_t(j.get<bool>()) : j.get<int64_t>(); }

/// int ** int (exponent >= 0); false on overflow.
bool intPow(int64_t base, int64_t exp, int64_t &out) {
  for (out = 1; exp > 0; exp >>= 1)
    if (((exp & 1) && __builtin_mul_overflow(out, base, &out)) ||
        (exp > 1 && __builtin_mul_overflow(base, base, &base)))
      return false;
  return true;
}

/// Python's int arithmetic within 64 bits: floor division and modulo round toward -infinity.
OJson intArith(const std::string &op, int64_t x, int64_t y, bool &overflow) {
  int64_t r = 0;
  if (op == "/")
    return double(x) / double(y);
  if (op == "**" && y < 0)
    return std::pow(double(x), double(y));
  if (op == "+")
    overflow = __builtin_add_overflow(x, y, &r);
  else if (op == "-")
    overflow = __builtin_sub_overflow(x, y, &r);
  else if (op == "*")
    overflow = __builtin_mul_overflow(x, y, &r);
  else if (op == "**")
    overflow = !intPow(x, y, r);
  else if (y == -1) // x // -1 and x % -1: INT64_MIN / -1 traps in C++
    overflow = op == "//" && x == INT64_MIN, r = (op == "//" && !overflow) ? -x : 0;
  else if (op == "//")
    r = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
  else
    r = x % y + (((x % y != 0) && ((x % y < 0) != (y < 0))) ? y : 0);
  return r;
}

/// Python's float arithmetic (its divmod's rounding for // and %).
double floatArith(const std::string &op, double x, double y) {
  if (op == "+" || op == "-" || op == "*" || op == "/")
    return op == "+" ? x + y : op == "-" ? x - y : op == "*" ? x * y : x / y;
  if (op == "**")
    return std::pow(x, y);
  double mod = std::fmod(x, y), div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0)))
    mod += y, div -= 1;
  if (op == "%")
    return mod != 0 ? mod : std::copysign(0.0, y);
  double fl = std::floor(div);
  return div == 0 ? std::copysign(0.0, x / y) : div - fl > 0.5 ? fl + 1 : fl;
}

/// The file's names and config keys, shared by the file's parser and its f-string fields' parsers.
struct State {
  const std::string &origin;
  std::map<std::string, Value> env;
  std::set<std::string> imported;
  OJson out = OJson::object();
  int depth = 0;
  size_t total = 0;
};

/// Statements and expressions over one token list; f-string fields get a Parser of their own.
class Parser {
public:
  Parser(State &st, std::vector<Token> toks) : st(st), t(std::move(toks)) {}

  void file() {
    while (peek().kind != Tok::End)
      statement();
  }

private:
  State &st;
  std::vector<Token> t;
  size_t p = 0;

  struct Guard {
    int &depth;
    ~Guard() { --depth; }
  };

  const Token &peek(size_t k = 0) const { return t[std::min(p + k, t.size() - 1)]; }
  bool isOp(const char *op, size_t k = 0) const { return peek(k).kind == Tok::Op && peek(k).text == op; }
  bool isKw(const char *kw) const { return peek().kind == Tok::Name && peek().text == kw; }
  bool isPlainName(size_t k = 0) const { return peek(k).kind == Tok::Name && !isKeyword(peek(k).text); }
  bool atStatementEnd() const { return peek().kind == Tok::Newline || peek().kind == Tok::End || isOp(";"); }
  [[noreturn]] void refuse(int line, const std::string &what) const { unsupported(st.origin, line, what); }
  [[noreturn]] void error(int line, const std::string &msg) const { fail(st.origin, line, msg); }

  [[noreturn]] void unexpected(const Token &tk) const {
    if (tk.kind == Tok::End || tk.kind == Tok::Newline)
      error(tk.line, std::string("invalid syntax: the ") + (tk.kind == Tok::End ? "file" : "line") +
                         " ends inside a statement");
    if (tk.kind == Tok::Name && isKeyword(tk.text)) {
      const std::string &what = keywords().at(tk.text);
      refuse(tk.line, "'" + tk.text + "' (" + (what.empty() ? "a statement other than an assignment" : what) + ")");
    }
    if (isAugmented(tk))
      refuse(tk.line, "the augmented assignment '" + tk.text + "'");
    if (tk.kind == Tok::Indent)
      refuse(tk.line, "an indented line (a block)");
    if (tk.kind == Tok::Op && (tk.text.size() > 1 || !std::strchr("()[]{},:.;=", tk.text[0])))
      refuse(tk.line, "the operator '" + tk.text + "'");
    error(tk.line, "invalid syntax at " + (tk.kind == Tok::Str ? std::string("a string") : "'" + show(tk.text) + "'"));
  }

  void expectOp(const char *op) {
    if (!isOp(op))
      unexpected(peek());
    ++p;
  }

  std::string expectName() {
    if (!isPlainName())
      unexpected(peek());
    return t[p++].text;
  }

  void endStatement() {
    if (!atStatementEnd())
      unexpected(peek());
    p += peek().kind != Tok::End;
  }

  void statement() {
    const Token &tk = peek();
    if (tk.kind == Tok::Newline || isOp(";")) {
      ++p;
    } else if (isKw("import") || isKw("from")) {
      importStmt();
    } else if (tk.kind == Tok::Str) {
      exprList(); // a docstring: read (so that it is well formed), not kept
      endStatement();
    } else if (isPlainName() && (isOp("=", 1) || isOp(":", 1))) {
      assignment();
    } else if (isPlainName() && isAugmented(peek(1))) {
      unexpected(peek(1));
    } else if (isPlainName() && isOp(",", 1)) {
      refuse(tk.line, "unpacking (assigning to several names separated by commas)");
    } else if (tk.kind == Tok::Name && isKeyword(tk.text) && tk.text != "True" && tk.text != "False" &&
               tk.text != "None") {
      unexpected(tk);
    } else {
      exprList(); // refuses what it cannot read first: calls, names never assigned
      if (isOp("="))
        refuse(tk.line, "an assignment to something other than a plain name");
      if (!atStatementEnd())
        unexpected(peek());
      refuse(tk.line, "an expression statement (a value not assigned to a name)");
    }
  }

  // `import a.b as c, d` and `from ..a.b import c, d as e` or `(c, d,)`: binds the names only.
  void importStmt() {
    bool from = isKw("from");
    ++p;
    if (from) {
      bool relative = false;
      for (; isOp(".") || isOp("..."); ++p)
        relative = true;
      if (!relative || !isKw("import")) { // the module's dotted name
        expectName();
        while (isOp("."))
          ++p, expectName();
      }
      if (!isKw("import"))
        unexpected(peek());
      ++p;
      if (isOp("*"))
        refuse(peek().line, "'from ... import *'");
    }
    bool paren = from && isOp("(");
    p += paren;
    do {
      if (paren && isOp(")"))
        break;
      std::string name = expectName();
      while (!from && isOp("."))
        ++p, expectName();
      if (isKw("as"))
        ++p, name = expectName();
      st.env.erase(name), st.out.erase(name), st.imported.insert(name);
    } while (isOp(",") && ++p);
    if (paren)
      expectOp(")");
    endStatement();
  }

  // `A = B = expr` and `NAME: annotation [= expr]` (the annotation is skipped: types mean nothing here).
  void assignment() {
    std::vector<std::pair<std::string, int>> targets;
    for (; isPlainName() && isOp("=", 1); p += 2)
      targets.push_back({peek().text, peek().line});
    if (targets.empty()) {
      targets.push_back({peek().text, peek().line});
      for (p += 2; !atStatementEnd() && !isOp("="); ++p)
        ; // the lexer balanced the brackets, so an `=` here ends the annotation
      if (atStatementEnd())
        return endStatement(); // declared, not bound
      ++p;
    }
    Value v = exprList();
    if (isOp("="))
      refuse(peek().line, "an assignment to something other than a plain name");
    endStatement();
    for (const auto &[name, line] : targets) {
      if ((st.total += v.weight) > kMaxTotal)
        error(line, "the config is too large (over " + std::to_string(kMaxTotal) + " elements in all)");
      st.imported.erase(name);
      st.env[name] = v;
      if (name[0] != '_')
        st.out[name] = v.j; // a name assigned again keeps its first place, as in a module's dict
    }
  }

  void checkWeight(size_t weight, int line) const {
    if (weight > kMaxWeight)
      error(line, "a value too large (over " + std::to_string(kMaxWeight) + " elements, or 16 characters each)");
  }

  void grow(Value &into, Value part, int line) const {
    checkWeight(into.weight += part.weight, line);
    if (into.j.is_array())
      into.j.push_back(std::move(part.j));
  }

  /// `a, b, ...` up to the statement's end: one value, or a tuple when there is a comma.
  Value exprList() {
    int line = peek().line;
    Value first = expr(0);
    if (!isOp(","))
      return first;
    Value tuple{OJson::array(), true};
    grow(tuple, std::move(first), line);
    while (isOp(",") && ++p && !atStatementEnd())
      grow(tuple, expr(0), line);
    return tuple;
  }

  /// Binary operators by precedence: level 0 is + and -, level 1 is * / // %.
  Value expr(int level) {
    static const std::set<std::string> ops[] = {{"+", "-"}, {"*", "/", "//", "%"}};
    Value v = level == 0 ? expr(1) : factor();
    while (peek().kind == Tok::Op && ops[level].count(peek().text)) {
      const Token &op = t[p++];
      v = binary(op.text, v, level == 0 ? expr(1) : factor(), op.line);
    }
    return v;
  }

  // Unary signs, then `atom ** factor`: -2 ** 2 is -4 and 2 ** -1 is 0.5, as in Python.
  Value factor() {
    // Bounds the recursion: every nesting level of an expression passes through here.
    if (++st.depth > kMaxDepth) // the parse ends, so the count need not come down
      refuse(peek().line, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    Guard guard{st.depth};
    if (isOp("-") || isOp("+")) {
      const Token &op = t[p++];
      Value a = factor();
      if (a.symbol || !isNumber(a.j))
        refuse(op.line, "unary '" + op.text + "' on " + typeName(a));
      if (a.j.is_number_float())
        return Value{op.text == "-" ? -a.j.get<double>() : a.j.get<double>()};
      if (op.text == "-" && asInt(a.j) == INT64_MIN)
        refuse(op.line, "an integer result beyond 64 bits");
      return Value{op.text == "-" ? -asInt(a.j) : asInt(a.j)};
    }
    Value base = atom();
    if (!isOp("**"))
      return base;
    const Token &op = t[p++];
    return binary("**", base, factor(), op.line);
  }

  Value atom() {
    const Token &tk = peek();
    Value v;
    if (tk.kind == Tok::Int || tk.kind == Tok::Float) {
      v.j = tk.kind == Tok::Int ? OJson(tk.i) : OJson(tk.f), ++p;
    } else if (tk.kind == Tok::Str) {
      v = strings();
    } else if (isKw("True") || isKw("False") || isKw("None")) {
      v.j = tk.text == "None" ? OJson(nullptr) : OJson(tk.text == "True"), ++p;
    } else if (isPlainName()) {
      v = name();
    } else if (isOp("(") || isOp("[")) {
      v = bracketed();
    } else if (isOp("{")) {
      v = dict(false);
    } else {
      unexpected(tk);
    }
    if (isOp("("))
      refuse(peek().line, "a call of " + typeName(v));
    if (isOp("["))
      refuse(peek().line, "a subscript ('[...]' after " + typeName(v) + ")");
    if (isOp("."))
      refuse(peek().line, "an attribute or method of " + typeName(v));
    return v;
  }

  Value name() {
    const Token &tk = t[p++];
    if (isOp("(") && tk.text == "dict" && !st.env.count("dict") && !st.imported.count("dict"))
      return dict(true);
    if (isOp("("))
      refuse(tk.line, "a call of '" + tk.text + "()'");
    if (st.imported.count(tk.text)) { // the dotted name as written, e.g. "AMP_TYPE.TORCH"
      Value v = text(tk.text);
      for (; isOp(".") && peek(1).kind == Tok::Name; p += 2)
        v.j = v.j.get<std::string>() + "." + peek(1).text;
      v.symbol = true;
      return v;
    }
    auto it = st.env.find(tk.text);
    if (it != st.env.end())
      return it->second;
    for (size_t k = p; t[k].kind != Tok::Newline && t[k].kind != Tok::End; ++k)
      if (t[k].kind == Tok::Name && t[k].text == "for") // a comprehension's variable
        refuse(t[k].line, "a comprehension ('for' inside brackets)");
    refuse(tk.line, "a reference to '" + tk.text + "' (a name not assigned earlier in the file)");
  }

  // `( ... )` (a parenthesized value or a tuple) and `[ ... ]` (a list).
  Value bracketed() {
    bool list = isOp("[");
    const char *close = list ? "]" : ")";
    int line = t[p++].line;
    Value v{OJson::array(), !list};
    if (isOp(close))
      return ++p, v;
    Value first = expr(0);
    if (!list && isOp(")"))
      return ++p, first;
    grow(v, std::move(first), line);
    while (isOp(",") && ++p && !isOp(close))
      grow(v, expr(0), line);
    expectOp(close);
    return v;
  }

  // `{k: v, ...}` and `dict(k=v, ...)`: a repeated key keeps its first place and its last value.
  Value dict(bool call) {
    int line = t[p++].line;
    Value v{OJson::object()};
    while (!isOp(call ? ")" : "}")) {
      int keyLine = peek().line;
      if (isOp("**"))
        refuse(keyLine, call ? "'**' unpacking in dict()" : "'**' unpacking in a dict");
      if (call && (!isPlainName() || !isOp("=", 1)))
        refuse(keyLine, "an argument of dict() other than key=value");
      Value key = call ? text(t[p].text) : expr(0);
      p += call ? 2 : 0;
      if (!call && (isOp(",") || isOp("}")))
        refuse(keyLine, "a set");
      if (!call)
        expectOp(":");
      if (!key.j.is_string() || key.symbol)
        refuse(keyLine, "a dict key that is " + typeName(key) + " (JSON keys are strings)");
      std::string k = key.j.get<std::string>();
      if (call && v.j.contains(k))
        error(keyLine, "invalid syntax: dict() is given '" + k + "' twice");
      Value val = expr(0);
      checkWeight(v.weight += val.weight, line);
      v.j[k] = std::move(val.j);
      if (!isOp(",") || !++p)
        break;
    }
    expectOp(call ? ")" : "}");
    return v;
  }

  // Adjacent literals, each decoded (or, for an f-string, evaluated), joined.
  Value strings() {
    std::string s;
    while (peek().kind == Tok::Str) {
      const Token &tk = t[p++];
      s += tk.fstr ? fstring(tk) : tk.raw ? tk.text : decodeEscapes(tk.text, st.origin, tk.line);
      checkWeight(s.size() / 16, tk.line);
    }
    return text(std::move(s));
  }

  /// The body of an f-string with `{{`, `}}` and its fields replaced.
  std::string fstring(const Token &tk) {
    const std::string &b = tk.text;
    std::string out, lit;
    for (size_t i = 0; i <= b.size();) {
      char c = i < b.size() ? b[i] : '{', n = i + 1 < b.size() ? b[i + 1] : '\0';
      if (c == '\\' && n != '{' && n != '}' && n != '\0') {
        lit += b.substr(i, 2), i += 2;
      } else if ((c == '{' || c == '}') && n == c) {
        lit += c, i += 2;
      } else if (c == '}') {
        error(tk.line, "invalid syntax: a single '}' in an f-string");
      } else if (c != '{') {
        lit += c, ++i;
      } else {
        out += tk.raw ? lit : decodeEscapes(lit, st.origin, tk.line);
        lit.clear();
        if (i == b.size())
          break;
        size_t e = fieldEnd(b, i + 1, tk.line);
        out += field(b.substr(i + 1, e - i - 1), tk.line);
        checkWeight(out.size() / 16, tk.line);
        i = e + 1;
      }
    }
    return out;
  }

  /// Where the f-string field starting at `i` ends (its `}`); refuses conversions and format specs.
  size_t fieldEnd(const std::string &b, size_t i, int line) const {
    for (int depth = 0; i < b.size() && (depth > 0 || b[i] != '}'); ++i) {
      char d = b[i];
      if ((d == '\'' || d == '"') && (i = b.find(d, i + 1)) == std::string::npos)
        error(line, "invalid syntax: a string that never ends in an f-string");
      if (depth == 0 && d == '!' && (i + 1 >= b.size() || b[i + 1] != '='))
        refuse(line, "an f-string conversion ('!r', '!s', '!a')");
      if (depth == 0 && d == ':')
        refuse(line, "an f-string format spec ('{x:...}')");
      depth += (d == '(' || d == '[' || d == '{') ? 1 : (d == ')' || d == ']' || d == '}') ? -1 : 0;
    }
    if (i >= b.size())
      error(line, "invalid syntax: an f-string '{' without its '}'");
    return i;
  }

  /// One f-string field, read as a parenthesized expression, as str() would print it.
  std::string field(const std::string &expr, int line) {
    size_t last = expr.find_last_not_of(" \t\n");
    if (last == std::string::npos)
      error(line, "invalid syntax: an empty f-string field '{}'");
    if (expr[last] == '=' && (last == 0 || !std::strchr("=!<>", expr[last - 1])))
      refuse(line, "a self-documenting f-string field ('{x=}')");
    std::string wrapped = "(" + expr + ")";
    Parser sub(st, Lexer(wrapped, st.origin, line).run());
    Value v = sub.exprList();
    sub.endStatement();
    if (sub.peek().kind != Tok::End)
      sub.unexpected(sub.peek());
    if (v.j.is_string())
      return v.j.get<std::string>();
    if (v.j.is_null() || v.j.is_boolean())
      return v.j.is_null() ? "None" : v.j.get<bool>() ? "True" : "False";
    if (v.j.is_number_float())
      return pyFloat(v.j.get<double>());
    if (v.j.is_number_integer())
      return std::to_string(v.j.get<int64_t>());
    refuse(line, typeName(v) + " inside an f-string");
  }

  Value binary(const std::string &op, const Value &a, const Value &b, int line) const {
    std::string what = "'" + op + "' between " + typeName(a) + " and " + typeName(b);
    const OJson &x = a.j, &y = b.j;
    bool joins = (x.is_string() && y.is_string()) || (x.is_array() && y.is_array() && a.tuple == b.tuple);
    if (op == "+" && joins && !a.symbol && !b.symbol) {
      checkWeight(a.weight + b.weight, line);
      if (x.is_string())
        return text(x.get<std::string>() + y.get<std::string>());
      Value v = a;
      v.weight += b.weight;
      v.j.insert(v.j.end(), y.begin(), y.end());
      return v;
    }
    if (a.symbol || b.symbol || !isNumber(x) || !isNumber(y))
      refuse(line, what);
    bool ints = isInt(x) && isInt(y), overflow = false;
    double fx = asDouble(x), fy = asDouble(y);
    if ((fy == 0 && (op == "/" || op == "//" || op == "%")) || (op == "**" && fx == 0 && fy < 0))
      error(line, "division by zero (" + what + ")");
    if (!ints && op == "**" && fx < 0 && fy != std::floor(fy))
      refuse(line, "a negative number to a fractional power (a complex number)");
    Value r{ints ? intArith(op, asInt(x), asInt(y), overflow) : OJson(floatArith(op, fx, fy))};
    if (overflow)
      refuse(line, "an integer result beyond 64 bits (" + what + ")");
    if (r.j.is_number_float() && !std::isfinite(r.j.get<double>()))
      refuse(line, "a float result that is infinite or NaN (" + what + ")");
    return r;
  }
};

/// The line of the first byte that is not UTF-8 (overlong forms and surrogates included), or 0.
int badUtf8Line(const std::string &s) {
  int line = 1;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = (unsigned char)s[i];
    line += c == '\n';
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size())
      return line;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      if (((unsigned char)s[i + k] & 0xc0) != 0x80)
        return line;
      cp = cp << 6 | ((unsigned char)s[i + k] & 0x3f);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
      return line;
    i += n;
  }
  return 0;
}

} // namespace

nlohmann::ordered_json parsePyConfigOrdered(const std::string &text, const std::string &origin) {
  std::string src = text.compare(0, 3, "\xef\xbb\xbf") == 0 ? text.substr(3) : text, norm;
  if (int line = badUtf8Line(src))
    fail(origin, line, "the file is not valid UTF-8");
  for (size_t i = 0; i < src.size(); ++i) { // universal newlines, as Python reads source
    if (src[i] == '\0')
      fail(origin, int(std::count(norm.begin(), norm.end(), '\n')) + 1, "invalid syntax: a NUL byte");
    if (src[i] != '\r' || i + 1 >= src.size() || src[i + 1] != '\n')
      norm += src[i] == '\r' ? '\n' : src[i];
  }
  State st{origin, {}, {}};
  Parser(st, Lexer(norm, origin, 1).run()).file();
  return std::move(st.out);
}

nlohmann::json parsePyConfig(const std::string &text, const std::string &origin) {
  return nlohmann::json(parsePyConfigOrdered(text, origin));
}

nlohmann::json readPyConfig(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw ConfigError(path + ": cannot open the config file: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    throw ConfigError(path + ": is a directory, not a config file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw ConfigError(path + ": cannot open the config file: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parsePyConfig(text.str(), path);
}

} // namespace cpc
