#!/usr/bin/env bash
# ctest: bash tests/check_compose.sh <srcdir> <builddir>
# Validates docker-compose.yml offline with Debian's docker-compose (v1, no daemon needed) and
# checks the stack's shape: rabbitmq, postgres and processing-server, the latter depending on
# the other two (condition: service_healthy).
set -euo pipefail

SRC=${1:?usage: check_compose.sh <srcdir> <builddir>}
FILE=$SRC/docker-compose.yml

fail() {
  echo "check_compose: FAIL: $*" >&2
  exit 1
}

[ -f "$FILE" ] || fail "$FILE not found"
command -v docker-compose >/dev/null 2>&1 ||
  fail "docker-compose is not installed (Debian: apt-get install --no-install-recommends docker-compose; scripts/setup.sh --tests does it)"

# one run (docker-compose is Python: each start costs seconds of CPU in the suite); config
# validates as config -q does, and prints the file as resolved
if ! config=$(docker-compose -f "$FILE" config 2>&1); then
  echo "$config" >&2
  fail "docker-compose config rejected $FILE"
fi

# docker-compose is Python and depends on python3-yaml, so Debian's python3 can read it.
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
if ! out=$(printf '%s\n' "$config" | "$PY" -c '
import sys, yaml
cfg = yaml.safe_load(sys.stdin)
services = cfg.get("services") or {}
errors = []
for name in ("rabbitmq", "postgres", "processing-server"):
    if name not in services:
        errors.append("service %r missing" % name)
ps = services.get("processing-server") or {}
deps = ps.get("depends_on") or {}
if isinstance(deps, list):
    deps = {d: {} for d in deps}
for name in ("rabbitmq", "postgres"):
    if name not in deps:
        errors.append("processing-server does not depend on %r" % name)
    elif (deps[name] or {}).get("condition") != "service_healthy":
        errors.append("processing-server depends on %r without condition: service_healthy" % name)
for name in ("rabbitmq", "postgres", "processing-server"):
    if name in services and "healthcheck" not in services[name]:
        errors.append("service %r has no healthcheck" % name)
if errors:
    print("\n".join(errors))
    sys.exit(1)
print("services: " + ", ".join(sorted(services)))
' 2>&1); then
  echo "$out" >&2
  fail "$FILE does not have the expected shape"
fi
# The image builds what CMakeLists.txt needs and runs what the program links: every
# pkg-config module's -dev package in the build stage, every shared library's package in
# the runtime stage (the packages that own them here, by dpkg -S).
BUILD=${2:-}
DOCKERFILE=$SRC/Dockerfile
for mod in $(sed -n 's/^pkg_check_modules([A-Z_]* REQUIRED IMPORTED_TARGET \([^ )]*\)).*/\1/p' "$SRC/CMakeLists.txt"); do
  [ "$mod" = criterion ] && continue
  pc=$(pkg-config --variable=pcfiledir "$mod")/$mod.pc
  pkg=$(dpkg -S "$pc" 2>/dev/null | head -n1 | cut -d: -f1)
  [ -n "$pkg" ] || fail "no Debian package owns $pc"
  grep -qw -- "$pkg" "$DOCKERFILE" || fail "Dockerfile: the build stage lacks $pkg (for $mod)"
done
if [ -n "$BUILD" ] && [ -x "$BUILD/mqproc" ]; then
  for lib in $(ldd "$BUILD/mqproc" | awk '/=> \// {print $3}'); do
    pkg=$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null | head -n1 | cut -d: -f1) ||
      pkg=$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1) || true
    [ -n "$pkg" ] || pkg=$(dpkg -S "$lib" 2>/dev/null | head -n1 | cut -d: -f1 || true)
    case $pkg in "" | libc6 | libgcc-s1 | libstdc++6 | libasan* | libubsan* | libcriterion*) continue ;; esac
    # a library another listed one pulls in is installed with it; check the direct ones
    if ! grep -qw -- "$pkg" "$DOCKERFILE" && objdump -p "$BUILD/mqproc" | grep -q "NEEDED *$(basename "$lib")$"; then
      fail "Dockerfile: the runtime stage lacks $pkg (for $(basename "$lib"))"
    fi
  done
fi
echo "check_compose: OK ($out)"
