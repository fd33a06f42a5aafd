#!/usr/bin/env python3
"""Lists the longest function bodies in the project's C++ sources.

clang-formatted code puts a function definition's closing brace alone in
column 0 (or at the class's indentation for one defined in a class body).
A definition starts at the first line of its signature: the line after the
previous top-level statement. Counted: lines from the signature's first line
to the closing brace, inclusive.

  scripts/function_lengths.py [--top N] [--max L] [DIR ...]

With --max, exits 1 if any function is longer than L lines (and lists them).
"""
import argparse
import os
import re
import sys

SKIP_DIRS = {"build", ".git", "third_party"}


def functions(path):
    """Yields (name, first_line, lines) for each function definition."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    # Blank out comments, strings and preprocessor lines, keeping newlines.
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)),
                  text, flags=re.S)
    text = re.sub(r'R"(\w*)\((.|\n)*?\)\1"',
                  lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"^[ \t]*#[^\n]*", "", text, flags=re.M)
    stack = []  # "ns", "cls", "fn", "blk"
    header = ""  # code since the last boundary in a namespace or class scope
    header_line = None
    line = 1
    fn_start = None
    fn_name = ""
    for ch in text:
        if ch == "\n":
            line += 1
        scope_open = all(k in ("ns", "cls") for k in stack)
        if ch == "{":
            if scope_open:
                h = " ".join(header.split())
                if re.match(r"^(inline\s+)?namespace\b|^extern\s", h):
                    stack.append("ns")
                elif re.match(r"^(template\s*<.*>\s*)?(class|struct|union|enum)\b", h) \
                        and "(" not in h.split("{")[0].split(":")[0]:
                    stack.append("cls")
                elif "(" in h and ")" in h and "=" not in h.split("(")[0]:
                    stack.append("fn")
                    fn_start = header_line or line
                    m = re.search(r"([~\w:<>]+)\s*\(", h)
                    fn_name = h.split("{")[0] if h.startswith("TEST") else (
                        m.group(1) if m else h[:40])
                    if h.startswith("TEST"):
                        fn_name = h[:h.find(")") + 1]
                else:
                    stack.append("blk")
                header, header_line = "", None
            else:
                stack.append("blk")
            continue
        if ch == "}":
            kind = stack.pop() if stack else "blk"
            if kind == "fn":
                yield fn_name, fn_start, line - fn_start + 1
            if all(k in ("ns", "cls") for k in stack):
                header, header_line = "", None
            continue
        if scope_open:
            if ch == ";":
                header, header_line = "", None
            else:
                if header_line is None and not ch.isspace():
                    header_line = line
                header += ch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--max", type=int, default=0)
    ap.add_argument("dirs", nargs="*", default=["engine", "auditor", "kernels",
                                                 "common", "storage", "canaries"])
    args = ap.parse_args()
    found = []
    for d in args.dirs:
        for root, dirs, files in os.walk(d):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
            for name in files:
                if name.endswith((".cc", ".h", ".cu")):
                    path = os.path.join(root, name)
                    for fn, line, n in functions(path):
                        found.append((n, f"{path}:{line}", fn))
    found.sort(reverse=True)
    over = [f for f in found if args.max and f[0] > args.max]
    for n, where, fn in (over if args.max else found[:args.top]):
        print(f"{n:5d}  {fn}  {where}")
    if args.max:
        print(f"{len(over)} function(s) over {args.max} lines", file=sys.stderr)
        return 1 if over else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
