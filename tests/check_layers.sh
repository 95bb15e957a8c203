#!/usr/bin/env bash
# ctest: bash tests/check_layers.sh <srcdir> <builddir>
# src/ is in layers, one folder each, and a file may include only headers of its own layer
# or of the layers before it (docs/architecture.md, "Layers"):
#   base net loop codec broker store runner delivery ops http server, then entry/ (the
#   library's entry point), then cli/ (the mqproc program)
# It fails when a file includes a header of a later layer, when a header a file includes
# from src/ is in no layer, and when a source file lies in src/ outside a folder.
set -euo pipefail

SRC=${1:?usage: check_layers.sh <srcdir> <builddir>}
cd "$SRC/src"

LAYERS=(base net loop codec broker store runner delivery ops http server entry cli)
# (no command substitutions per include: a subshell each made this 12 s of CPU)
declare -A RANK
for i in "${!LAYERS[@]}"; do
  RANK[${LAYERS[$i]}]=$i
done

bad=0
files=0
while IFS= read -r -d '' f; do
  f=${f#./}
  files=$((files + 1))
  own=""
  [[ $f == */* ]] && own=${f%%/*}
  own_rank=""
  [ -n "$own" ] && own_rank=${RANK[$own]:-}
  if [ -z "$own_rank" ]; then
    echo "check_layers: FAIL: $f is in no layer's folder" >&2
    bad=1
    continue
  fi
  while IFS= read -r inc; do
    # a header beside the file (its own folder's, by a bare name) is its own layer's
    if [[ $inc != */* ]] && [ -e "${f%/*}/$inc" ]; then
      continue
    fi
    [ -e "$inc" ] || continue # not one of src/'s (the public header, a system one)
    dep=""
    [[ $inc == */* ]] && dep=${inc%%/*}
    dep_rank=""
    [ -n "$dep" ] && dep_rank=${RANK[$dep]:-}
    if [ -z "$dep_rank" ]; then
      echo "check_layers: FAIL: $f includes $inc, which is in no layer" >&2
      bad=1
    elif [ "$dep_rank" -gt "$own_rank" ]; then
      echo "check_layers: FAIL: $f ($own) includes $inc ($dep), a later layer" >&2
      bad=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find . -name '*.[ch]' -print0 | sort -z)

[ "$files" -gt 0 ] || { echo "check_layers: FAIL: no sources found" >&2; exit 1; }
if [ "$bad" -ne 0 ]; then
  exit 1
fi
echo "check_layers: OK ($files files in ${#LAYERS[@]} layers)"
