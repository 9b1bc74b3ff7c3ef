#!/usr/bin/env python3
"""No function over 80 lines and no file over 800 lines without a comment saying why.

The brief's rule for code one would want to live in (issue 30's acceptance). A long function
says why in the comment block right above it, on a line holding `Over 80 lines:` and a reason; a
long file says why in its first 40 lines with `Over 800 lines:` and a reason. Functions are
found by their braces (a block opened at namespace or class level that is not a namespace,
class, struct, enum or union), after comments, string and character literals and raw strings
are blanked, so a brace inside them does not count.

    check_sizes.py SOURCE_DIR            (exit 1 listing each function or file without a why)
"""
import pathlib
import re
import sys

LAYERS = ("frontends", "dialects", "passes", "compiler", "runtime", "kernels", "tools", "support")
SUFFIXES = {".cpp", ".h", ".cu", ".cuh"}
MAX_FUNCTION, MAX_FILE = 80, 800
FUNCTION_WHY = re.compile(r"//.*Over 80 lines: \S")
FILE_WHY = re.compile(r"//.*Over 800 lines: \S")


def blank_literals(text):
    """The text with comments, raw strings, strings and chars replaced by spaces (newlines kept)."""
    pattern = re.compile(r'R"([^(\s]*)\((?:.|\n)*?\)\1"|//[^\n]*|/\*(?:.|\n)*?\*/|"(?:\\.|[^"\\\n])*"|'
                         r"'(?:\\.|[^'\\\n])*'")
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def long_functions(lines):
    """(first line index, length) of every function body over MAX_FUNCTION lines."""
    code = blank_literals("\n".join(lines)).split("\n")
    stack, found = [], []
    for number, line in enumerate(code):
        for char in line:
            if char == "{":
                head = " ".join(code[max(0, number - 2):number + 1])
                if re.search(r"\b(namespace|extern\s+\"C\")\s*[\w:]*\s*\{\s*$", line):
                    kind = "namespace"
                elif re.search(r"\b(class|struct|enum|union)\b[^;()]*\{\s*$", head):
                    kind = "type"
                else:
                    kind = "block"
                stack.append((kind, number))
            elif char == "}" and stack:
                kind, start = stack.pop()
                enclosing = [k for k, _ in stack if k != "namespace"]
                if kind == "block" and enclosing in ([], ["type"]) and number - start + 1 > MAX_FUNCTION:
                    found.append((start, number - start + 1))
    return found


def says_why(lines, start):
    """Whether the comment block above the line where a function's signature begins says why."""
    i = start
    while i > 0 and lines[i - 1].strip() and not lines[i - 1].strip().startswith(("//", "}")) and \
            not lines[i - 1].rstrip().endswith((";", "{")):
        i -= 1  # the signature's earlier lines
    while i > 0 and lines[i - 1].strip().startswith("//"):
        i -= 1
        if FUNCTION_WHY.search(lines[i]):
            return True
    return False


def offences(source):
    found = []
    for layer in LAYERS:
        for path in sorted((source / layer).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            lines = path.read_text(errors="replace").splitlines()
            where = path.relative_to(source)
            if len(lines) > MAX_FILE and not any(FILE_WHY.search(line) for line in lines[:40]):
                found.append("%s: %d lines, and no `// Over 800 lines: why` in its first 40" % (where, len(lines)))
            for start, length in long_functions(lines):
                if not says_why(lines, start):
                    found.append("%s:%d: a function of %d lines (%s), and no `// Over 80 lines: why` above it" %
                                 (where, start + 1, length, lines[start].strip()[:60]))
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    found = offences(pathlib.Path(sys.argv[1]))
    for line in found:
        print(line)
    print("check_sizes: %d function%s or file%s over the limits without a why" %
          (len(found), "" if len(found) == 1 else "s", "" if len(found) == 1 else "s"))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
