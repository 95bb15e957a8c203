#!/usr/bin/env bash
# ctest: bash tests/check_format.sh <srcdir> <builddir>
# clang-format --dry-run --Werror over the C sources (src/ include/ tests/ examples/) using the
# repo's .clang-format. Fix with: clang-format -i <files>
set -euo pipefail

SRC=${1:?usage: check_format.sh <srcdir> <builddir>}
cd "$SRC"

command -v clang-format >/dev/null 2>&1 ||
  {
    echo "check_format: FAIL: clang-format is not installed (bash scripts/setup.sh --tests installs it)" >&2
    exit 1
  }

dirs=()
for d in src include tests examples tools; do
  [ -d "$d" ] && dirs+=("$d")
done

files=()
if [ ${#dirs[@]} -gt 0 ]; then
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # tracked files plus new, not ignored ones (present on disk)
    while IFS= read -r -d '' f; do
      [ -f "$f" ] && files+=("$f")
    done < <(git ls-files -z --cached --others --exclude-standard -- "${dirs[@]}" |
      grep -zE '\.[ch]$' | sort -zu)
  else
    while IFS= read -r -d '' f; do
      files+=("$f")
    done < <(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' \) -print0 | sort -z)
  fi
fi

if [ ${#files[@]} -eq 0 ]; then
  echo "check_format: no C files to check"
  exit 0
fi

# one clang-format for every file (a process per file took 40 s of CPU in the suite); the
# files one by one only when some differ, to name them
bad=()
if ! clang-format --dry-run --Werror "${files[@]}" >/dev/null 2>&1; then
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
      bad+=("$f")
    fi
  done
  [ ${#bad[@]} -gt 0 ] || bad=("${files[0]}") # it failed as a whole: say so at least
fi

if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: FAIL: ${#bad[@]} of ${#files[@]} files are not clang-formatted:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "first differences:" >&2
  clang-format --dry-run "${bad[0]}" 2>&1 | head -n 20 >&2 || true
  echo "fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check_format: OK (${#files[@]} files)"
