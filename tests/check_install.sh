#!/usr/bin/env bash
# ctest: bash tests/check_install.sh <srcdir> <builddir>
# `cmake --install` puts the mqproc program, libmqproc (shared + static), the public header
# and mqproc.pc under a prefix; a C processor then builds against it with pkg-config alone
# and answers --version and --help.
set -euo pipefail
SRC=${1:?usage: check_install.sh <srcdir> <builddir>}
BUILD=${2:?usage: check_install.sh <srcdir> <builddir>}
PREFIX=$(mktemp -d "$BUILD/install-check.XXXXXX")
trap 'rm -rf "$PREFIX"' EXIT
fail() {
  echo "check_install: FAIL: $*" >&2
  exit 1
}

cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
LIBDIR=$(cd "$PREFIX" && ls -d lib*/ | head -n 1)
LIBDIR=$PREFIX/${LIBDIR%/}
for f in "$PREFIX/bin/mqproc" "$PREFIX/include/mqproc/mqproc.h" "$LIBDIR/libmqproc.so" \
  "$LIBDIR/libmqproc.a" "$LIBDIR/pkgconfig/mqproc.pc"; do
  [ -e "$f" ] || fail "missing $f"
done

# Sanitized builds need the same runtime in anything that links the library.
extra=()
if grep -q '^MQPROC_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  extra=(-fsanitize=address,undefined)
fi
cat >"$PREFIX/proc.c" <<'C'
#include <mqproc/mqproc.h>
static int process(mqproc_job_t *job, void *ud) {
  (void)ud;
  mqproc_job_log(job, "hello from %s", mqproc_job_id(job));
  return 0;
}
int main(int argc, char **argv) {
  static const mqproc_processor_t p = {.name = "ocrd-installcheck", .version = "9.9",
                                       .process = process};
  return mqproc_main(argc, argv, &p);
}
C
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
# shellcheck disable=SC2046
cc -Wall -Werror "${extra[@]}" "$PREFIX/proc.c" -o "$PREFIX/ocrd-installcheck" \
  $(pkg-config --cflags --libs mqproc) -Wl,-rpath,"$LIBDIR" || fail "cannot build against the install"
out=$("$PREFIX/ocrd-installcheck" --version) || fail "--version failed"
[ "$out" = "ocrd-installcheck 9.9 (mqproc $(grep -oP 'MQPROC_VERSION "\K[^"]+' "$SRC/include/mqproc/mqproc.h"))" ] ||
  fail "unexpected --version output: $out"
help=$("$PREFIX/ocrd-installcheck" --help) || fail "--help failed"
grep -q -- '--queue' <<<"$help" || fail "--help lacks --queue"
"$PREFIX/bin/mqproc" --version | grep -q '^mqproc ' || fail "installed mqproc does not run"
echo "check_install: OK ($PREFIX)"
