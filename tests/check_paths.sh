#!/usr/bin/env bash
# ctest: bash tests/check_paths.sh <srcdir> <builddir>
# The comments and docs name files that exist. It reads the comments of the C files (src/,
# include/, tools/, tests/, examples/), the `#` comments of the CMake files, and
# docs/*.md and README.md, and fails, naming file:line, when one names a source file the
# tree does not hold:
#   - a path with a folder, `runner/proc.c`, `store/pg/engine.c`, `mqproc/mqproc.h`: some
#     file of the tree's must end in it (`pg/jobs.c` is src/store/pg/jobs.c);
#   - a path from the top, `src/...`: it must exist as written (a file or a folder);
#   - a bare name, `proc.c`: some file of the tree's must be called so;
#   - `loop.c/h` and `entry.{c,h}` name both; a `*` (`worker*.c`) must match one.
# Names in <...> are system includes and are not looked at. ALLOW below holds the names a
# comment may give that are not ours: examples, and the headers of the system and of the
# libraries we build on.
set -euo pipefail

SRC=${1:?usage: check_paths.sh <srcdir> <builddir>}
cd "$SRC"

exec python3 - <<'PY'
import fnmatch
import os
import re
import subprocess
import sys

# Not ours, and may be named: examples, and headers of the system or of a library we build
# on that a comment names without <...>. Keep it short: a name here is never checked.
ALLOW = {
    "foo.c",  # README: building a processor of one's own, `cc foo.c ...`
    "librabbitmq/amqp_socket.h", "librabbitmq/amqp_private.h",  # rabbitmq-c's insides
}

def tree_files():
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            check=True, capture_output=True).stdout.decode()
        return sorted(f for f in out.split("\0") if f and os.path.exists(f))
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk("."):
            dirs[:] = [d for d in dirs if d != ".git" and
                       not os.path.exists(os.path.join(root, d, "CMakeCache.txt"))]
            files += [os.path.normpath(os.path.join(root, n)) for n in names]
        return sorted(files)

FILES = tree_files()
FILESET = set(FILES)
DIRS = {os.path.dirname(f) for f in FILES}
for d in list(DIRS):
    while d:
        DIRS.add(d)
        d = os.path.dirname(d)
BASENAMES = {os.path.basename(f) for f in FILES}

def c_comments(text):
    """(line, text) of each comment of a C file; strings and chars are skipped."""
    out = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append((line, text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k, part in enumerate(text[i:j].split("\n")):
                out.append((line + k, part))
            line += text.count("\n", i, j)
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j)
            i = j + 1
        else:
            i += 1
    return out

def hash_comments(text):
    out = []
    for no, l in enumerate(text.split("\n"), 1):
        k = l.find("#")
        if k >= 0:
            out.append((no, l[k:]))
    return out

def all_lines(text):
    return list(enumerate(text.split("\n"), 1))

P = r"[A-Za-z0-9_.*-]"
# a file's own name has no dot ("a.b.c" is a host name)
NAME = re.compile(r"(?<![A-Za-z0-9_./*<-])((?:%s+/)*[A-Za-z0-9_*-]+)"
                  r"\.(\{c,h\}|c/h|h/c|[ch])(?![A-Za-z0-9_/])" % P)
SRCDIR = re.compile(r"(?<![A-Za-z0-9_./<-])src/[A-Za-z0-9_./*-]*")

def exists(name):
    if name in ALLOW:
        return True
    while name.startswith("./") or name.startswith("../"):
        name = name.split("/", 1)[1]
    glob = "*" in name
    if name.startswith("src/") or name.startswith("include/") or name.startswith("tests/"):
        if glob:
            return any(fnmatch.fnmatchcase(f, name) for f in FILES)
        return name in FILESET or name.rstrip("/") in DIRS
    if "/" in name:
        if glob:
            return any(fnmatch.fnmatchcase(f, "*/" + name) or fnmatch.fnmatchcase(f, name)
                       for f in FILES)
        return name in FILESET or any(f.endswith("/" + name) for f in FILES)
    if glob:
        return any(fnmatch.fnmatchcase(b, name) for b in BASENAMES)
    return name in BASENAMES

def names_in(s):
    for m in NAME.finditer(s):
        stem, ext = m.group(1), m.group(2)
        exts = ["c", "h"] if ext in ("{c,h}", "c/h", "h/c") else [ext]
        for e in exts:
            yield m.group(0), "%s.%s" % (stem, e)
    for m in SRCDIR.finditer(s):
        name = m.group(0).rstrip(".")
        if re.search(r"\.[ch]$", name) or name.endswith(".{c,h}"):
            continue  # a file, looked at above
        yield name, name

def scanned():
    for f in FILES:
        top = f.split("/", 1)[0]
        if top in ("src", "include", "tools", "tests", "examples") and re.search(r"\.[ch]$", f):
            yield f, c_comments
        elif f in ("README.md",) or (f.startswith("docs/") and f.endswith(".md")):
            yield f, all_lines
        elif os.path.basename(f) == "CMakeLists.txt" or f.endswith(".cmake"):
            yield f, hash_comments

bad = 0
count = 0
for f, reader in scanned():
    count += 1
    with open(f, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    for line, s in reader(text):
        for shown, name in names_in(s):
            if not exists(name):
                print("check_paths: FAIL: %s:%d names %s, which is not in the tree"
                      % (f, line, shown if shown == name else "%s (%s)" % (shown, name)),
                      file=sys.stderr)
                bad += 1
if count == 0:
    print("check_paths: FAIL: nothing to read", file=sys.stderr)
    sys.exit(1)
if bad:
    print("check_paths: %d stale names; name the file's path now (or, for an example or a "
          "header not ours, add it to ALLOW in tests/check_paths.sh)" % bad, file=sys.stderr)
    sys.exit(1)
print("check_paths: OK (%d files read)" % count)
PY
