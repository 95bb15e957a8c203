#!/usr/bin/env bash
# Install the Debian 12 packages one use of mqproc needs, and no more (README's dependency
# table says why each is there):
#
#   bash scripts/setup.sh              # build mqproc + the embedded demo (README command 1)
#   bash scripts/setup.sh --rabbitmq   # + RabbitMQ, PostgreSQL, amqp-tools (demo.sh --rabbitmq)
#   bash scripts/setup.sh --tests      # everything the test suite needs (README command 2, CI)
#   bash scripts/setup.sh --list [--rabbitmq|--tests]   # print that list; install nothing
#   MQPROC_SETUP_FORCE=1 bash scripts/setup.sh ...       # apt even when all are installed
#
# It skips apt entirely when every package of the list is installed. Runs as root, or
# through sudo for a normal user. After installing RabbitMQ or PostgreSQL it stops what the
# packages auto-started (system RabbitMQ, the postgresql 15 main cluster, the rabbitmq
# user's epmd on 4369): the project runs its own private servers (scripts/services.sh).
set -euo pipefail

# building libmqproc, the mqproc program, ocrd-example and ocrd-dummy; the embedded demo
# (dir:// + sqlite://) needs nothing more than what it builds
BUILD_PACKAGES=(
  build-essential cmake pkg-config
  librabbitmq-dev libpq-dev libjansson-dev libcurl4-openssl-dev libyaml-dev libssl-dev
  libmicrohttpd-dev libsqlite3-dev libxml2-dev libpcre2-dev
)
# the private RabbitMQ + PostgreSQL of scripts/services.sh, and publishing over AMQP
RABBITMQ_PACKAGES=(rabbitmq-server postgresql amqp-tools curl iproute2 procps)
# the test suite on top of both (tests/, tests/interop/, the check_*.sh scripts)
TEST_PACKAGES=(
  git ca-certificates openssl clang-format libcriterion-dev sqlite3 pgbouncer
  python3 python3-pika python3-yaml python3-jsonschema
  docker-compose jq systemd prometheus chromium
)

log() { printf 'setup: %s\n' "$*"; }
usage() {
  echo "usage: bash scripts/setup.sh [--rabbitmq | --tests] [--list]" >&2
  exit 2
}

group=build
list_only=0
for a in "$@"; do
  case $a in
  --rabbitmq) group=rabbitmq ;;
  --tests) group=tests ;;
  --list) list_only=1 ;;
  *) usage ;;
  esac
done
PACKAGES=("${BUILD_PACKAGES[@]}")
[ "$group" = build ] || PACKAGES+=("${RABBITMQ_PACKAGES[@]}")
[ "$group" != tests ] || PACKAGES+=("${TEST_PACKAGES[@]}")
# OCR-D core's own processors and METS server, run from ../shared/ocrd (when it is there) by
# the tests that check mqproc against them: Debian's python3 packages they import
OCRD_PACKAGES_FILE=$(dirname "${BASH_SOURCE[0]}")/../../shared/ocrd/packages.txt
if [ "$group" = tests ] && [ -f "$OCRD_PACKAGES_FILE" ]; then
  while read -r p; do
    [ -n "$p" ] && PACKAGES+=("$p")
  done <"$OCRD_PACKAGES_FILE"
fi

if [ "$list_only" = 1 ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    log "not root and sudo is not installed: run this script as root" >&2
    exit 1
  fi
fi

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ] && [ "${MQPROC_SETUP_FORCE:-0}" != 1 ]; then
  log "all ${#PACKAGES[@]} packages ($group) already installed; skipping apt (MQPROC_SETUP_FORCE=1 forces it)"
  exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
  log "missing packages ($group): ${missing[*]}"
else
  log "MQPROC_SETUP_FORCE=1: running apt anyway"
fi

t0=$SECONDS
log "apt-get update"
"${SUDO[@]}" apt-get update
log "apt-get install -y --no-install-recommends ${PACKAGES[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${PACKAGES[@]}"
log "apt done in $((SECONDS - t0)) s"

if [ "$group" = build ]; then # no servers among the packages
  log "done in $((SECONDS - t0)) s"
  exit 0
fi

# --- stop what the packages may have auto-started --------------------------------------
# (Nothing starts in containers where policy-rc.d denies it; on a normal Debian box the
# system RabbitMQ node and the 15/main cluster do. Each step only acts if it is running.)

if pgrep -u rabbitmq -x beam.smp >/dev/null 2>&1; then
  log "stopping the system rabbitmq-server (auto-started by the package)"
  "${SUDO[@]}" service rabbitmq-server stop || log "warning: 'service rabbitmq-server stop' failed"
  for _ in $(seq 1 50); do
    pgrep -u rabbitmq -x beam.smp >/dev/null 2>&1 || break
    sleep 0.2
  done
fi

if command -v pg_lsclusters >/dev/null 2>&1; then
  # "15 main 5432 online postgres ..." -> stop only a running 15/main
  if pg_lsclusters --no-header 2>/dev/null | awk '$1 == "15" && $2 == "main" && $4 ~ /^online/ { f = 1 } END { exit !f }'; then
    log "stopping the postgresql 15/main cluster (auto-started by the package)"
    "${SUDO[@]}" pg_ctlcluster 15 main stop || log "warning: 'pg_ctlcluster 15 main stop' failed"
  fi
fi

# Any rabbitmqctl call (even from the init script) leaves a daemonised epmd on 0.0.0.0:4369
# running as user rabbitmq. Kill it by pid, only when it belongs to the rabbitmq user.
if id rabbitmq >/dev/null 2>&1; then
  for pid in $(pgrep -u rabbitmq -x epmd 2>/dev/null || true); do
    log "killing the rabbitmq user's epmd (pid $pid)"
    "${SUDO[@]}" kill "$pid" 2>/dev/null || true
  done
fi

log "done in $((SECONDS - t0)) s"
