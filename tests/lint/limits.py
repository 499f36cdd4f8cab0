#!/usr/bin/env python3
"""The size limits of the source tree (issue 16 item 6), checked in CI.

  - no source file over 600 lines (C++, headers, .inc declaration files, .proto, Python, shell,
    CMake);
  - no C++ function over 120 lines, as Universal Ctags measures it (the "end" field of each
    function tag: from its first line to its closing brace, comments included).

Test data (tests/testdata) and README are not source. Prints every violation with its size and
where it is, then one summary line; exits 1 when there is any, 0 otherwise, 77 (skipped) when
ctags is missing.

Usage: limits.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
SOURCE_SUFFIXES = (".cc", ".h", ".inc", ".proto", ".py", ".sh", ".cmake", "CMakeLists.txt")
CPP_SUFFIXES = (".cc", ".h")
SKIP_PREFIXES = ("tests/testdata/",)


def source_files(root):
    """Tracked files when the tree is a git checkout, else every file under root."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                             text=True).stdout.split("\n")
        files = [f for f in out if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, _, names in os.walk(root):
            if "/build" in d or "/.git" in d:
                continue
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(f for f in files
                  if f.endswith(SOURCE_SUFFIXES) and not f.startswith(SKIP_PREFIXES)
                  and os.path.isfile(os.path.join(root, f)))


def long_functions(root, files, ctags):
    """(lines, name, file:line) of every C++ function longer than the limit."""
    cpp = [f for f in files if f.endswith(CPP_SUFFIXES)]
    out = subprocess.run(
        [ctags, "-x", "--_xformat=%{line} %{end} %{scope} %N %F", "--kinds-C++=f",
         "--fields=+ne", "--language-force=C++", "-o", "-"] + cpp,
        cwd=root, check=True, capture_output=True, text=True).stdout
    found = []
    for row in out.splitlines():
        parts = row.split()
        if len(parts) < 4 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        begin, end = int(parts[0]), int(parts[1])
        name = parts[-2] if len(parts) == 4 else parts[2] + "::" + parts[3]
        lines = end - begin + 1
        if lines > MAX_FUNCTION_LINES:
            found.append((lines, name, "%s:%d" % (parts[-1], begin)))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    ctags = shutil.which("ctags-universal") or shutil.which("ctags")
    if ctags is None:
        print("limits: Universal Ctags is not installed (Debian universal-ctags); skipped")
        return 77
    files = source_files(root)
    bad = 0
    longest_file = (0, "")
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            n = sum(1 for _ in fh)
        longest_file = max(longest_file, (n, f))
        if n > MAX_FILE_LINES:
            print("file over %d lines: %s (%d)" % (MAX_FILE_LINES, f, n))
            bad += 1
    functions = long_functions(root, files, ctags)
    for lines, name, where in sorted(functions, reverse=True):
        print("function over %d lines: %s at %s (%d)" % (MAX_FUNCTION_LINES, name, where, lines))
        bad += 1
    print("limits: %d source files, longest %s (%d lines); %d violations" %
          (len(files), longest_file[1], longest_file[0], bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
