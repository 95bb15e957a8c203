#!/usr/bin/env bash
# The test suite: sanitizer build in build/test, private RabbitMQ + PostgreSQL
# (scripts/services.sh, stopped on exit), then ctest. Extra arguments go to ctest:
#   bash scripts/test.sh                 # everything
#   bash scripts/test.sh -L unit         # unit tests only
#   bash scripts/test.sh -R integration/test_foo
# Env: MQPROC_TEST_SERVICES=0 skips starting the servers (enough for -L unit / -L check);
#      MQPROC_TEST_JOBS (default 2) for the build and ctest; MQPROC_TEST_BUILD_DIR (build/test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${MQPROC_TEST_BUILD_DIR:-build/test}
SERVICES=${MQPROC_SERVICES_DIR:-build/services}
JOBS=${MQPROC_TEST_JOBS:-2}
# ctest runs more tests than cores at once: the integration tests mostly wait on servers
# (a run took 62 % of two cores at -j4; each suite counts its two criterion jobs)
CTEST_JOBS=${MQPROC_CTEST_JOBS:-6}

now_ms() { date +%s%3N; }
phase_start=0
phase() {
  phase_start=$(now_ms)
  echo "=== test.sh: $*"
}
phase_done() {
  local d=$(($(now_ms) - phase_start))
  printf '=== test.sh: %s took %d.%02d s\n' "$1" $((d / 1000)) $((d % 1000 / 10))
}

phase configure
cmake -S . -B "$BUILD" -DMQPROC_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
phase_done configure

phase build
cmake --build "$BUILD" -j"$JOBS"
phase_done build

services_started=0
# shellcheck disable=SC2317 # (called by the trap)
cleanup() {
  local rc=$?
  if [ "$services_started" = 1 ]; then
    phase "stop services"
    bash scripts/services.sh stop "$SERVICES" || true
    phase_done "stop services"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "${MQPROC_TEST_SERVICES:-1}" != 0 ]; then
  phase "start services"
  services_started=1
  # with TLS: an amqps listener and ssl=on in PostgreSQL for tests/integration/test_tls.c
  MQPROC_SERVICES_TLS=1 bash scripts/services.sh start "$SERVICES"
  phase_done "start services"
  set -a
  # shellcheck disable=SC1091
  . "$SERVICES/env"
  set +a
fi

# LeakSanitizer works in this sandbox (checked: no ptrace restriction), so leaks fail tests.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-print_suppressions=0}

phase "ctest $*"
rc=0
ctest --test-dir "$BUILD" --output-on-failure -j"$CTEST_JOBS" "$@" || rc=$?
phase_done ctest
exit $rc
