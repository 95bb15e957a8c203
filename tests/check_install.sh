#!/usr/bin/env bash
# ctest: bash tests/check_install.sh <srcdir> <builddir>
# README's "Install, and a processor of your own", done as written against an install in a
# temporary prefix (README's "prefix of your own" form): `cmake --install --prefix`,
# PKG_CONFIG_PATH, `pkg-config mqproc`, the C block of README.md compiled with README's
# `cc` lines (shared with -rpath, and with libmqproc.a linked in), `./ocrd-foo --version`
# and `--help`, one job through `./ocrd-foo processing-server` on dir:// + sqlite://
# submitted with `mqproc submit --wait`. The C source is cut out of README.md and every
# command run here must appear there verbatim, so the two cannot drift apart. Also checks
# what the install put where: mqproc.pc's paths and Requires.private, the unit's ExecStart,
# the installed programs running without LD_LIBRARY_PATH or ldconfig.
# shellcheck disable=SC2016 # (readme_has takes README's lines verbatim, $ and all)
set -euo pipefail
SRC=${1:?usage: check_install.sh <srcdir> <builddir>}
BUILD=${2:?usage: check_install.sh <srcdir> <builddir>}
README=$SRC/README.md
PREFIX=$(mktemp -d "$BUILD/install-check.XXXXXX")
server_pid=
# shellcheck disable=SC2317 # (called by the trap)
cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$PREFIX"
}
trap cleanup EXIT
fail() {
  echo "check_install: FAIL: $*" >&2
  exit 1
}
# readme_has LINE: README.md holds this command line verbatim (after its indentation)
readme_has() {
  grep -qxF -- "    $1" "$README" || fail "README.md no longer has the line: $1"
}
VERSION=$(grep -oP 'MQPROC_VERSION "\K[^"]+' "$SRC/include/mqproc/mqproc.h")

# --- the install --------------------------------------------------------------------------
readme_has 'cmake --install build/release --prefix "$HOME/.local"'
cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
# lib, or lib/<multiarch> when the build was configured for the /usr prefix (GNUInstallDirs)
LIBDIR=$PREFIX/$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$BUILD/CMakeCache.txt")
for f in "$PREFIX/bin/mqproc" "$PREFIX/bin/ocrd-example" "$PREFIX/bin/ocrd-dummy" \
  "$PREFIX/include/mqproc/mqproc.h" "$LIBDIR/libmqproc.so.0" "$LIBDIR/libmqproc.so" \
  "$LIBDIR/libmqproc.a" "$LIBDIR/pkgconfig/mqproc.pc" "$PREFIX/lib/systemd/system/mqproc@.service" \
  "$PREFIX/share/mqproc/sql/001_jobs.sql" "$PREFIX/share/doc/mqproc/day-two.md" \
  "$PREFIX/share/doc/mqproc/README.md"; do
  [ -e "$f" ] || fail "the install lacks $f"
done
grep -qx "ExecStart=$PREFIX/bin/mqproc processing-server" "$PREFIX/lib/systemd/system/mqproc@.service" ||
  fail "the installed unit does not run $PREFIX/bin/mqproc"
# the installed programs find libmqproc.so beside them (RUNPATH), no ldconfig needed
out=$("$PREFIX/bin/mqproc" --version) || fail "installed mqproc does not run"
[[ $out == "mqproc $VERSION"* ]] || fail "installed mqproc --version: $out"
"$PREFIX/bin/ocrd-example" --version >/dev/null || fail "installed ocrd-example does not run"
"$PREFIX/bin/ocrd-dummy" --version >/dev/null || fail "installed ocrd-dummy does not run"

# --- pkg-config -----------------------------------------------------------------------------
readme_has 'export PATH="$HOME/.local/bin:$PATH" PKG_CONFIG_PATH="$HOME/.local/lib/pkgconfig"'
export PATH="$PREFIX/bin:$PATH" PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
readme_has 'pkg-config --modversion mqproc'
[ "$(pkg-config --modversion mqproc)" = "$VERSION" ] || fail "pkg-config --modversion mqproc"
[ "$(pkg-config --variable=libdir mqproc)" = "$LIBDIR" ] ||
  fail "mqproc.pc's libdir is $(pkg-config --variable=libdir mqproc), not $LIBDIR"
# a static link of libmqproc needs every library it calls: all of them are named
static=" $(pkg-config --static --libs mqproc) "
for l in -lmqproc -lrabbitmq -lpq -ljansson -lcurl -lyaml -lcrypto -lssl -lsqlite3 \
  -lmicrohttpd -pthread; do
  [[ $static == *" $l "* ]] || fail "pkg-config --static --libs mqproc lacks $l: $static"
done

# --- README's processor ---------------------------------------------------------------------
WORK=$PREFIX/work
mkdir -p "$WORK"
cd "$WORK"
# the first ```c block after the marker comment that names this script
awk '/tests\/check_install.sh compiles this C block/ { m = 1 }
     m && /^```c$/ { on = 1; next }
     on && /^```$/ { exit }
     on { print }' "$README" >foo.c
grep -q 'mqproc_main' foo.c || fail "no C processor found in README.md (the marker comment moved?)"

# Sanitized builds need the same runtime in anything that links the library.
extra=()
if grep -q '^MQPROC_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt"; then
  extra=("-fsanitize=address,undefined")
fi
# the system-wide form: what `ldconfig` does for /usr/local/lib, LD_LIBRARY_PATH does here
readme_has 'cc foo.c $(pkg-config --cflags --libs mqproc) -o ocrd-foo'
# shellcheck disable=SC2046
cc foo.c $(pkg-config --cflags --libs mqproc) -o ocrd-foo -Wall -Wextra -Werror "${extra[@]}" ||
  fail "cannot build README's processor"
out=$(LD_LIBRARY_PATH=$LIBDIR ./ocrd-foo --version) || fail "--version failed (system-wide form)"
rm ocrd-foo
# the prefix form, which finds the library by its -rpath
readme_has 'cc foo.c $(pkg-config --cflags --libs mqproc) -Wl,-rpath,"$(pkg-config --variable=libdir mqproc)" -o ocrd-foo'
# shellcheck disable=SC2046
cc foo.c $(pkg-config --cflags --libs mqproc) -Wl,-rpath,"$(pkg-config --variable=libdir mqproc)" \
  -o ocrd-foo -Wall -Wextra -Werror "${extra[@]}" || fail "cannot build README's processor"
readme_has './ocrd-foo --version'
out=$(./ocrd-foo --version) || fail "--version failed"
[ "$out" = "ocrd-foo 1.0 (mqproc $VERSION)" ] || fail "unexpected --version output: $out"
help=$(./ocrd-foo --help) || fail "--help failed"
grep -q -- '--queue' <<<"$help" || fail "--help lacks --queue"

# one job, as README runs it (the server waits for the database it creates with --migrate
# before `submit --wait` reads it; a person types the next line later)
readme_has 'export MQPROC_QUEUE="dir://$PWD/spool" MQPROC_DATABASE="sqlite://$PWD/jobs.db"'
export MQPROC_QUEUE="dir://$PWD/spool" MQPROC_DATABASE="sqlite://$PWD/jobs.db"
export XDG_STATE_HOME=$WORK/state # the job logs' default home, kept inside the prefix
readme_has './ocrd-foo processing-server --migrate &'
./ocrd-foo processing-server --migrate >server.log 2>&1 &
server_pid=$!
deadline=$((SECONDS + 60))
until grep -q "consuming from queue" server.log; do
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited: $(cat server.log)"
  [ $SECONDS -lt $deadline ] || fail "the server did not consume within 60 s: $(cat server.log)"
  sleep 0.1
done
readme_has 'mqproc submit --processor ocrd-foo --mets /data/ws1/mets.xml -I OCR-D-IMG --wait'
out=$(timeout 120 mqproc submit --processor ocrd-foo --mets /data/ws1/mets.xml -I OCR-D-IMG --wait) ||
  fail "submit --wait: the job did not succeed: $out $(cat server.log)"
id=${out%%$'\n'*}
readme_has 'mqproc jobs list'
out=$(mqproc jobs list) || fail "jobs list failed"
grep -qE "^$id +ocrd-foo +SUCCESS " <<<"$out" || fail "jobs list does not show $id SUCCESS: $out"
out=$(mqproc jobs log "$id") || fail "jobs log failed"
grep -qx "processing /data/ws1/mets.xml" <<<"$out" || fail "the job's log lacks the processor's line: $out"
kill -TERM "$server_pid"
wait "$server_pid" || fail "the server did not stop cleanly: $(cat server.log)"
server_pid=

# --- libmqproc linked in ----------------------------------------------------------------------
readme_has 'cc foo.c $(pkg-config --cflags mqproc) "$(pkg-config --variable=libdir mqproc)/libmqproc.a" $(pkg-config --libs $(pkg-config --print-requires-private mqproc)) -pthread -o ocrd-foo'
rm -f ocrd-foo
# shellcheck disable=SC2046
cc foo.c $(pkg-config --cflags mqproc) "$(pkg-config --variable=libdir mqproc)/libmqproc.a" \
  $(pkg-config --libs $(pkg-config --print-requires-private mqproc)) -pthread -o ocrd-foo \
  "${extra[@]}" || fail "cannot link README's processor with libmqproc.a"
out=$(ldd ./ocrd-foo)
[[ $out != *libmqproc* ]] || fail "the static link still needs libmqproc.so: $out"
out=$(./ocrd-foo --version) || fail "--version of the static link failed"
[ "$out" = "ocrd-foo 1.0 (mqproc $VERSION)" ] || fail "static link: unexpected --version: $out"
echo "check_install: OK ($PREFIX)"
