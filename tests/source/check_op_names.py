#!/usr/bin/env python3
"""No op of the cpc dialect is named by a string literal in compiler/, runtime/, kernels/ or tools/.

Those layers know an op by its kind (kernels/OpKind.h, generated from the ODS definitions), and
the compiler by its C++ class; a literal such as "cpc.all_reduce" there is a second identity
that drifts from the dialect (issue 30). The op names come from the generated op table, so an
op added to CpcOps.td is covered at once. Attribute names with the dialect prefix
("cpc.sharding") are not ops and may appear.

    check_op_names.py OP_TABLE SOURCE_DIR
"""
import pathlib
import re
import sys

LAYERS = ("compiler", "runtime", "kernels", "tools")
SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".inc", ".def"}


def op_names(table):
    names = re.findall(r'^CPC_OP\(\w+, "([\w.]+)"', pathlib.Path(table).read_text(), re.M)
    if len(names) < 50:
        sys.exit("check_op_names: %s lists %d ops; is it the generated op table?" % (table, len(names)))
    return set(names)


def offences(source, names):
    literal = re.compile(r'"((?:cpc\.)?[a-z_0-9.]+)"')
    found = []
    for layer in LAYERS:
        for path in sorted((source / layer).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                for name in literal.findall(line):
                    if name in names:
                        found.append("%s:%d: %s" % (path.relative_to(source), number, line.strip()))
    return found


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    names = op_names(sys.argv[1])
    found = offences(pathlib.Path(sys.argv[2]), names)
    for line in found:
        print(line)
    if found:
        print("%d op name(s) written as string literals: use OpKind::... (kernels/OpKind.h) or the op's "
              "C++ class instead" % len(found))
        return 1
    print("no op named by a string literal in %s (%d ops checked)" % (", ".join(LAYERS), len(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
