#!/usr/bin/env bash
# ctest: bash tests/check_release_build.sh <srcdir> <builddir>
# The optimised build (Release, -O3: what the demo and the benches use) compiles without
# warnings too:
# optimising brings warnings (maybe-uninitialized, format-truncation) a -O0 sanitizer build never
# shows, and -Werror makes them errors.
set -euo pipefail
SRC=${1:?usage: check_release_build.sh <srcdir> <builddir>}
BUILD=${2:?usage: check_release_build.sh <srcdir> <builddir>}/release-check
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMQPROC_TESTS=OFF >/dev/null
if ! out=$(cmake --build "$BUILD" -j2 2>&1); then
  printf '%s\n' "$out" | grep -E 'error|warning' | head -n 20 >&2
  echo "check_release_build: FAIL: the Release build has errors" >&2
  exit 1
fi
echo "check_release_build: OK"
