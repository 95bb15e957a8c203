#!/usr/bin/env bash
# ctest: bash tests/check_systemd.sh <srcdir> <builddir>
# contrib/systemd/mqproc@.service passes `systemd-analyze verify` with no finding (unknown
# keys, wrong sections, bad values), with ExecStart pointing at the mqproc just built (verify
# checks that the program exists), as the instance mqproc@ocrd-check.service.
set -euo pipefail

SRC=${1:?usage: check_systemd.sh <srcdir> <builddir>}
BUILD=${2:?usage: check_systemd.sh <srcdir> <builddir>}
UNIT=$SRC/contrib/systemd/mqproc@.service

fail() {
  echo "check_systemd: FAIL: $*" >&2
  exit 1
}

[ -f "$UNIT" ] || fail "$UNIT not found"
command -v systemd-analyze >/dev/null 2>&1 ||
  fail "systemd-analyze is not installed (Debian: apt-get install systemd; scripts/setup.sh --tests does it)"
BIN=$(find "$(cd "$BUILD" && pwd)" -maxdepth 1 -name mqproc -type f -perm -u+x | head -1)
[ -n "$BIN" ] || fail "no mqproc program under $BUILD (build first)"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s|^ExecStart=/usr/local/bin/mqproc |ExecStart=$BIN |" "$UNIT" >"$dir/mqproc@.service"
grep -q "^ExecStart=$BIN processing-server" "$dir/mqproc@.service" || fail "ExecStart not found"
ln -s "$dir/mqproc@.service" "$dir/mqproc@ocrd-check.service"
# verify prints findings on stderr and may still exit 0 (unknown keys): any output fails
if ! out=$(cd "$dir" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify "$dir/mqproc@ocrd-check.service" 2>&1) ||
  [ -n "$out" ]; then
  fail "systemd-analyze verify: ${out:-exit status non-zero}"
fi
grep -q '^Type=notify$' "$UNIT" || fail "the unit is not Type=notify"
grep -q '^WatchdogSec=' "$UNIT" || fail "the unit sets no WatchdogSec"
echo "check_systemd: OK ($UNIT)"
