#!/usr/bin/env bash
# Throughput benchmark: in ONE run on the same private RabbitMQ + PostgreSQL (fsync and
# synchronous_commit ON), how fast mqproc is next to the raw limits of the broker, the
# database and fork+exec, and next to the tools a user would pick instead (a naive
# pika+psycopg2 worker, Celery 5, and the peers graphile-worker on the same PostgreSQL and
# BullMQ on a private Redis with AOF). Not part of the test suite. See bench/README.md.
#
#   bash bench/throughput.sh [--quick] [--rows=ROW,ROW...]
#
#   --quick        about a tenth of the jobs per row (a few minutes once built)
#   --rows=LIST    only these rows (names below) or groups: raw, tools, peers, mqproc
#                  raw_consume_p1 raw_consume_p100 raw_publish raw_publish_w1 raw_relay
#                  raw_db_1 raw_db_64 raw_fork naive celery graphile graphile_batched
#                  bullmq_c1 bullmq_c64 bullmq_c64_everysec graphile_latency mqproc_c_p1
#                  mqproc_c_p64 mqproc_c_batched mqproc_exec_p1 mqproc_exec_c2 latency
#                  embedded tq_pg_p1 tq_pg_batched tq_sqlite tq_sqlite_relaxed tq_latency
#                  (tq_*: the table queues, docs/table-queue.md: the database as the queue
#                  and the store, PostgreSQL or SQLite, jobs and results as rows)
#                  (embedded: the dir:// + sqlite:// pair, bench/embedded.sh, with its own
#                  raw limits on this disk: rows raw_dir_*, raw_sqlite_*, mqproc_dir_sqlite*)
#
# Prints the table on stdout (also written to build/throughput/last.txt), then one line
# `RESULT key=value ...` (keys in bench/README.md); progress goes to stderr.
# Exit status: 0 when the table was printed (rows may be n/a or FAIL), 2 on a setup error.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
REPO=$PWD

QUICK=0 ROWS_ARG=
usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 2
}
for arg in "$@"; do
  case $arg in
  --quick) QUICK=1 ;;
  --rows=*) ROWS_ARG=${arg#--rows=} ;;
  --help | -h) usage ;;
  *) echo "throughput: unknown argument $arg" >&2; usage ;;
  esac
done

PEER_ROWS=(graphile graphile_batched bullmq_c1 bullmq_c64 bullmq_c64_everysec)
ALL_ROWS=(raw_consume_p1 raw_consume_p100 raw_publish raw_publish_w1 raw_relay raw_db_1 raw_db_64 raw_fork
  naive celery "${PEER_ROWS[@]}" graphile_latency mqproc_c_p1 mqproc_c_p64 mqproc_c_batched mqproc_exec_p1
  mqproc_exec_c2 latency embedded tq_pg_p1 tq_pg_batched tq_sqlite tq_sqlite_relaxed tq_latency)
declare -A WANT=()
for r in ${ROWS_ARG//,/ }; do
  case $r in
  raw | tools | peers | mqproc) for x in "${ALL_ROWS[@]}"; do
    case $r:$x in raw:raw_* | tools:naive | tools:celery | peers:graphile* | peers:bullmq_* | mqproc:mqproc_* | \
      mqproc:latency | mqproc:embedded | mqproc:tq_*) WANT[$x]=1 ;; esac
  done ;;
  *) [[ " ${ALL_ROWS[*]} " == *" $r "* ]] || { echo "throughput: unknown row $r" >&2; exit 2; }
    WANT[$r]=1 ;;
  esac
done
[ -n "$ROWS_ARG" ] || for x in "${ALL_ROWS[@]}"; do WANT[$x]=1; done
selected() { [ -n "${WANT[$1]:-}" ]; }

# Jobs per row (full run: each row about 10 s at the speeds seen on a 2-core box, except
# raw_db_64, which slows down as its table grows: 60000 keeps it near the table sizes of the
# other rows; the fast peers take 4-10 s); --quick takes a tenth. Latency: seconds at the
# offered rate, then seconds to wait for stragglers.
declare -A N=([raw_consume_p1]=50000 [raw_consume_p100]=100000 [raw_publish]=60000
  [raw_publish_w1]=8000 [raw_relay]=60000 [raw_db_1]=10000 [raw_db_64]=60000 [raw_fork]=4000 [naive]=4000
  [celery]=5000 [graphile]=6000 [graphile_batched]=100000 [bullmq_c1]=10000 [bullmq_c64]=60000
  [bullmq_c64_everysec]=100000 [mqproc_c_p1]=2000 [mqproc_c_p64]=4000 [mqproc_c_batched]=4000
  [mqproc_exec_p1]=800 [mqproc_exec_c2]=800 [tq_pg_p1]=2000 [tq_pg_batched]=40000 [tq_sqlite]=40000
  [tq_sqlite_relaxed]=40000)
LAT_RATE=500 LAT_SECS=10 LAT_DRAIN=5 MAX_S=240 # MAX_S: longest wait for one row's results
if [ $QUICK = 1 ]; then
  for k in "${!N[@]}"; do N[$k]=$((N[$k] / 10)); done
  LAT_SECS=3 LAT_DRAIN=2 MAX_S=60
fi

BUILD=build/throughput
SERVICES=$BUILD/services
LOGS=$BUILD/logs
PY=/usr/bin/python3 # Debian's, where apt puts celery (not a pyenv or venv python)
TP=$REPO/$BUILD/tp_amqp
CLK_TCK=$(getconf CLK_TCK)
T0=$(date +%s%3N)
now_ms() { date +%s%3N; }
say() { printf '[throughput %6.1fs] %s\n' "$(awk -v a="$(now_ms)" -v b="$T0" 'BEGIN { print (a - b) / 1000 }')" "$*" >&2; }
setup_error() { say "setup error: $*"; exit 2; }

# ---- packages, build ---------------------------------------------------------------------
PACKAGES=(python3-celery python3-sqlalchemy python3-psycopg2 python3-pika redis-server)
missing=()
for p in "${PACKAGES[@]}"; do
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || setup_error "missing ${missing[*]}; run as root or install sudo"
    SUDO=(sudo)
  fi
  say "installing ${missing[*]}"
  { "${SUDO[@]}" apt-get update && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${PACKAGES[@]}"; } >&2 || setup_error "apt-get failed"
fi
"$PY" -c 'import celery, sqlalchemy, psycopg2, pika' 2>/dev/null || setup_error "$PY cannot import celery/sqlalchemy/psycopg2/pika"

mkdir -p "$BUILD"
say "building mqproc ($BUILD, Release, tests off) and the bench programs"
{ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMQPROC_TESTS=OFF &&
  cmake --build "$BUILD" -j2 --target mqproc_bin ocrd-example; } >"$BUILD/build.log" 2>&1 ||
  { tail -n 20 "$BUILD/build.log" >&2; setup_error "build failed (log: $BUILD/build.log)"; }
# shellcheck disable=SC2046
{ cc -O2 -Wall -Wextra -pthread bench/tp_amqp.c $(pkg-config --cflags --libs librabbitmq jansson) -o "$BUILD/tp_amqp" &&
  cc -O2 -Wall -Wextra bench/tp_pg.c $(pkg-config --cflags --libs libpq) -o "$BUILD/tp_pg" &&
  cc -O2 -Wall -Wextra bench/tp_fork.c -o "$BUILD/tp_fork"; } >>"$BUILD/build.log" 2>&1 ||
  { tail -n 20 "$BUILD/build.log" >&2; setup_error "cc failed (log: $BUILD/build.log)"; }
MQPROC=$REPO/$BUILD/mqproc EXAMPLE=$REPO/$BUILD/ocrd-example

# The peers (graphile-worker, BullMQ) are npm packages pinned by bench/peers/package-lock.json:
# `npm ci` there when node_modules is missing or older than the lock file. Without node or
# npm the peer rows say FAIL (PEERS_ERR) and the others go on.
PEERS=$REPO/bench/peers PEERS_ERR='' GW_VERSION='' BULLMQ_VERSION=''
want_peers() { local r; for r in "${PEER_ROWS[@]}" graphile_latency; do selected "$r" && return 0; done; return 1; }
if want_peers; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    PEERS_ERR="node or npm not installed"
  elif [ ! -f "$PEERS/node_modules/.package-lock.json" ] ||
    [ "$PEERS/package-lock.json" -nt "$PEERS/node_modules/.package-lock.json" ]; then
    say "installing the peers (npm ci in bench/peers)"
    (cd "$PEERS" && npm ci --no-audit --no-fund) >"$BUILD/npm.log" 2>&1 || PEERS_ERR="npm ci failed (log: $BUILD/npm.log)"
  fi
  if [ -z "$PEERS_ERR" ]; then
    GW_VERSION=$(node -p 'require(process.argv[1]).version' "$PEERS/node_modules/graphile-worker/package.json" 2>/dev/null)
    BULLMQ_VERSION=$(node -p 'require(process.argv[1]).version' "$PEERS/node_modules/bullmq/package.json" 2>/dev/null)
    [ -n "$GW_VERSION" ] && [ -n "$BULLMQ_VERSION" ] || PEERS_ERR="bench/peers/node_modules incomplete"
  fi
  [ -z "$PEERS_ERR" ] || say "peers: $PEERS_ERR"
fi

# ---- processes we start, services ----------------------------------------------------------
declare -A STARTED=() # pid -> "group" (a setsid'd process: its group is ours) or "1"
track() { STARTED[$1]=${2:-1}; }
running() { [ -e "/proc/$1" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
# stop PID [GRACE_S]: SIGTERM, up to GRACE_S seconds, then SIGKILL (its whole process group
# when we started it with setsid); reaps it and forgets it.
stop() {
  local pid=$1 grace=${2:-20} i
  if running "$pid"; then
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < grace * 10; i++)); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then
      say "pid $pid ignored SIGTERM for ${grace}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
    fi
  fi
  [ "${STARTED[$pid]:-}" != group ] || kill -KILL -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "STARTED[$pid]"
  return 0
}
reap() { wait "$1"; local rc=$?; unset "STARTED[$1]"; return "$rc"; } # reap PID: its exit status
# shellcheck disable=SC2317 # (called by the trap)
cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${!STARTED[@]}"; do stop "$p" 10; done
  [ -z "${REDIS_DIR:-}" ] || rm -rf "$REDIS_DIR"
  bash scripts/services.sh stop "$SERVICES" >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "starting private RabbitMQ + PostgreSQL in $SERVICES (fsync and synchronous_commit on)"
MQPROC_PG_FAST=0 bash scripts/services.sh start "$SERVICES" >"$BUILD/services-start.log" 2>&1 ||
  { cat "$BUILD/services-start.log" >&2; setup_error "services did not start"; }
AMQP=$(sed -n "s/^MQPROC_TEST_AMQP_URL='\(.*\)'$/\1/p" "$SERVICES/env")
PGBASE=$(sed -n "s/^MQPROC_TEST_PG_URL='\(.*\)\/[^/]*'$/\1/p" "$SERVICES/env")
ADMIN=$PGBASE/postgres BENCHDB=$PGBASE/bench
export PGCONNECT_TIMEOUT=5
sql() { timeout 60 psql "$1" -XAtqc "$2" 2>&1; }
[ "$(sql "$ADMIN" "select current_setting('fsync') || current_setting('synchronous_commit')")" = onon ] ||
  setup_error "PostgreSQL runs without fsync or synchronous_commit (MQPROC_PG_FAST?)"
sql "$ADMIN" "drop database if exists bench with (force)" >/dev/null
sql "$ADMIN" "create database bench" >/dev/null || setup_error "cannot create database bench"
# the servers' processes, for their CPU (PostgreSQL: the postmaster and its children)
PG_PID=$(head -n 1 "$SERVICES/pg/data/postmaster.pid" 2>/dev/null) BEAM_PID=$(cat "$SERVICES/rabbitmq/beam.pid" 2>/dev/null)
{ running "${PG_PID:-0}" && running "${BEAM_PID:-0}"; } || setup_error "no postmaster or beam.smp pid in $SERVICES"
rm -rf "$LOGS"
mkdir -p "$LOGS"
LOAD_START=$(cut -d' ' -f1 /proc/loadavg)

# ---- helpers -----------------------------------------------------------------------------
# Per row: R_RATE (number, n/a or FAIL), R_COMMITS, R_RAW, R_PEER, R_CEL (ratios), R_NOTE;
# per job: R_SRV (CPU ms of the worker or server process), R_PG (of PostgreSQL), R_MQ (of
# RabbitMQ, or Redis for BullMQ), R_WAL (PostgreSQL WAL bytes, or Redis AOF bytes for BullMQ).
declare -A R_RATE=() R_COMMITS=() R_RAW=() R_PEER=() R_CEL=() R_NOTE=() R_LABEL=()
declare -A R_SRV=() R_PG=() R_MQ=() R_WAL=()
RESULT=() # key=value, in order
kv() { [[ ${2:-} =~ ^-?[0-9]+(\.[0-9]+)?$ ]] && RESULT+=("$1=$2"); return 0; }
calc() { awk "BEGIN { printf \"%.${2:-1}f\", $1 }"; } # calc EXPR [DECIMALS]
kvof() { sed -n "s/.*\\b$2=\\([^ ]*\\).*/\\1/p" "$1" | tail -n 1; } # kvof FILE KEY
# pg_quiet: wait (at most 3 s) until no backend of the database bench is left: a client that
# exited may leave its backend a moment longer, with its counters not yet published.
pg_quiet() {
  local i
  for ((i = 0; i < 150; i++)); do pgrep -P "$PG_PID" -f '^postgres: [^ ]+ bench ' >/dev/null || return 0; sleep 0.02; done
}
commits() { pg_quiet; sql "$ADMIN" "select xact_commit from pg_stat_database where datname = 'bench'"; }
# cpu_ticks PID...: utime + stime (clock ticks); child_ticks PID: cutime + cstime (children
# it waited for, and theirs)
cpu_ticks() { local p s=0; for p in "$@"; do s=$((s + $(sed 's/.*) //' "/proc/$p/stat" | awk '{ print $12 + $13 }'))); done; echo "$s"; }
child_ticks() {
  # the server's reaped children, and its live ones (the spawn helper of --exec) with theirs
  local c s
  s=$(sed 's/.*) //' "/proc/$1/stat" | awk '{ print $14 + $15 }')
  # shellcheck disable=SC2013 # (pids separated by spaces)
  for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    s=$((s + $(sed 's/.*) //' "/proc/$c/stat" 2>/dev/null | awk '{ print $12 + $13 + $14 + $15 }')))
  done
  echo "$s"
}
status_kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; } # status_kb PID VmRSS
# tree_ticks PID: CPU ticks of a server: its own utime + stime, its reaped children's cutime +
# cstime, and its live children's utime + stime (PostgreSQL's backends, beam.smp's helpers).
# The children are listed first, so one reaped meanwhile is counted once (in cutime).
tree_ticks() {
  local kids c
  kids=$(cat /proc/"$1"/task/*/children 2>/dev/null)
  { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 + $14 + $15 }'
    for c in $kids; do cat "/proc/$c/stat" 2>/dev/null; done | sed 's/.*) //' | awk '{ print $12 + $13 }'
  } | awk '{ s += $1 } END { print s + 0 }'
}
wal_lsn() { sql "$ADMIN" "select pg_current_wal_lsn()"; }
# The servers' meter. meter_begin: read the WAL position, then PostgreSQL's and RabbitMQ's
# CPU ticks (in that order: the psql's backend is not counted); meter_delta: what they spent
# and wrote since -> D_PG, D_MQ (ticks), D_WAL (bytes).
declare -A M0=()
meter_begin() {
  M0[wal]=$(wal_lsn)
  M0[pg]=$(tree_ticks "$PG_PID") M0[mq]=$(tree_ticks "$BEAM_PID")
}
meter_delta() {
  D_PG=$(($(tree_ticks "$PG_PID") - M0[pg])) D_MQ=$(($(tree_ticks "$BEAM_PID") - M0[mq]))
  D_WAL=$(sql "$ADMIN" "select pg_wal_lsn_diff(pg_current_wal_lsn(), '${M0[wal]}')::bigint")
  [[ $D_WAL =~ ^[0-9]+$ ]] || D_WAL=
}
ms_per_job() { calc "($1) * 1000 / $CLK_TCK / $2" 3; } # ms_per_job TICKS N
# meter_end ROW N [WHAT] [PG_TICKS MQ_TICKS WAL_BYTES]: meter_delta, less the given start-up
# amounts, per job into the row's columns (WHAT: pg, mq, wal; default all three).
meter_end() {
  local row=$1 n=$2 what=${3:-pg mq wal}
  meter_delta
  [[ $what != *pg* ]] || R_PG[$row]=$(ms_per_job "$D_PG - ${4:-0}" "$n")
  [[ $what != *mq* ]] || R_MQ[$row]=$(ms_per_job "$D_MQ - ${5:-0}" "$n")
  [[ $what != *wal* ]] || [ -z "$D_WAL" ] || R_WAL[$row]=$(calc "($D_WAL - ${6:-0}) / $n" 0)
}
FAIL_REASON=
# try WHAT SECONDS OUT CMD...: run CMD under a timeout, stdout+stderr to OUT; on failure
# set FAIL_REASON from its last line. (In the background + wait, so that Ctrl-C is handled
# at once and the cleanup stops it.)
try() {
  local what=$1 secs=$2 out=$3 rc pid
  shift 3
  timeout "$secs" "$@" >"$out" 2>&1 &
  pid=$!
  track "$pid"
  reap "$pid"
  rc=$?
  [ "$rc" = 0 ] && return 0
  if [ "$rc" = 124 ]; then FAIL_REASON="$what: timed out after ${secs}s"; else FAIL_REASON="$what: $(tail -n 1 "$out")"; fi
  return 1
}
# wait_log FILE REGEX PID SECONDS: until REGEX is in FILE; fails when PID died or time is up.
wait_log() {
  local i
  for ((i = 0; i < $4 * 50; i++)); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    running "$3" || return 1
    sleep 0.02
  done
  return 1
}
pg_url() { echo "$BENCHDB?options=-csearch_path%3D$1"; } # the bench database, schema $1
fresh_schema() { sql "$BENCHDB" "drop schema if exists $1 cascade; create schema $1" >/dev/null; }
JOBS_TABLE="create table jobs (job_id text primary key, state text not null, attempt int not null default 0,
  worker_id text, lease_until timestamptz, updated_at timestamptz not null default now())"

# ---- rows: raw limits ----------------------------------------------------------------------
raw_publish() { # ROW WINDOW
  local q=tp-$1
  "$TP" delete "$AMQP" "$q" >/dev/null 2>&1
  try publish 300 "$LOGS/$1.out" "$TP" publish "$AMQP" "$q" "${N[$1]}" "$2" || return 1
  R_RATE[$1]=$(kvof "$LOGS/$1.out" rate) R_NOTE[$1]="N=${N[$1]}, persistent, mandatory"
  "$TP" delete "$AMQP" "$q" >/dev/null 2>&1
}
raw_consume() { # ROW PREFETCH ACK_EVERY
  local q=tp-$1
  "$TP" delete "$AMQP" "$q" >/dev/null 2>&1
  try fill 300 "$LOGS/$1.fill" "$TP" publish "$AMQP" "$q" "${N[$1]}" 1000 || return 1
  try consume 300 "$LOGS/$1.out" "$TP" consume "$AMQP" "$q" "${N[$1]}" "$2" "$3" || return 1
  R_RATE[$1]=$(kvof "$LOGS/$1.out" rate) R_NOTE[$1]="N=${N[$1]}, queue filled first"
  "$TP" delete "$AMQP" "$q" >/dev/null 2>&1
}
# The broker's share of the full protocol (consume, ack, publish a result with confirms),
# with the collector running as for the mqproc rows: the broker's limit for a server.
raw_relay() {
  local q=tp-raw_relay rq=tp-raw_relay-results n=${N[raw_relay]} cpid
  "$TP" delete "$AMQP" "$q" "$rq" >/dev/null 2>&1
  try fill 300 "$LOGS/raw_relay.fill" "$TP" publish "$AMQP" "$q" "$n" 1000 "$rq" || return 1
  timeout $((MAX_S + 30)) "$TP" collect "$AMQP" "$rq" "$n" 20 "$MAX_S" >"$LOGS/raw_relay.out" 2>&1 &
  cpid=$!
  track "$cpid"
  meter_begin
  try relay 300 "$LOGS/raw_relay.relay" "$TP" relay "$AMQP" "$q" "$rq" "$n" 100 50 || return 1
  reap "$cpid"
  meter_end raw_relay "$n" mq
  [ "$(kvof "$LOGS/raw_relay.out" success)" = "$n" ] || { FAIL_REASON="collector: $(tail -n 1 "$LOGS/raw_relay.out")"; return 1; }
  R_RATE[raw_relay]=$(kvof "$LOGS/raw_relay.out" rate)
  R_NOTE[raw_relay]="N=$n queued first; prefetch 100, ack/50, results confirmed (window 100)"
  "$TP" delete "$AMQP" "$q" "$rq" >/dev/null 2>&1
}
raw_db() { # ROW BATCH
  local c0 c1
  if ! fresh_schema "$1" || ! sql "$(pg_url "$1")" "$JOBS_TABLE" >/dev/null; then FAIL_REASON="cannot create the table"; return 1; fi
  c0=$(commits)
  meter_begin
  try tp_pg 300 "$LOGS/$1.out" "$BUILD/tp_pg" "$(pg_url "$1")" "${N[$1]}" "$2" || return 1
  c1=$(commits)
  meter_end "$1" "${N[$1]}" "pg wal"
  R_RATE[$1]=$(kvof "$LOGS/$1.out" rate) R_COMMITS[$1]=$(calc "($c1 - $c0) / ${N[$1]}" 3)
  R_NOTE[$1]="N=${N[$1]}, one connection"
  sql "$BENCHDB" "drop schema $1 cascade" >/dev/null
}
raw_fork() {
  try tp_fork 300 "$LOGS/raw_fork.out" "$BUILD/tp_fork" "${N[raw_fork]}" /bin/true || return 1
  R_RATE[raw_fork]=$(kvof "$LOGS/raw_fork.out" rate) R_NOTE[raw_fork]="N=${N[raw_fork]}"
}

# ---- rows: the tools a user would pick ---------------------------------------------------------
naive() {
  local q=ocrd-tp-naive rq=ocrd-tp-naive-results n=${N[naive]} cpid wpid c0 c1
  if ! fresh_schema naive || ! sql "$(pg_url naive)" "$JOBS_TABLE" >/dev/null; then FAIL_REASON="cannot create the table"; return 1; fi
  "$TP" delete "$AMQP" "$q" "$rq" >/dev/null 2>&1
  try publish 300 "$LOGS/naive.fill" "$TP" publish "$AMQP" "$q" "$n" 1000 "$rq" || return 1
  timeout $((MAX_S + 30)) "$TP" collect "$AMQP" "$rq" "$n" 20 "$MAX_S" >"$LOGS/naive.out" 2>&1 &
  cpid=$!
  c0=$(commits)
  meter_begin
  timeout $((MAX_S + 30)) "$PY" bench/tp_naive_worker.py "$AMQP" "$(pg_url naive)" "$q" "$n" 20 >"$LOGS/naive.worker" 2>&1 &
  wpid=$!
  track "$cpid"
  track "$wpid"
  reap "$cpid" || { FAIL_REASON="results: $(tail -n 1 "$LOGS/naive.out") (worker: $(tail -n 1 "$LOGS/naive.worker"))"; stop "$wpid" 5; return 1; }
  reap "$wpid"
  c1=$(commits)
  meter_end naive "$n"
  R_RATE[naive]=$(kvof "$LOGS/naive.out" rate) R_COMMITS[naive]=$(calc "($c1 - $c0) / $n" 3)
  R_NOTE[naive]="N=$n queued first"
  "$TP" delete "$AMQP" "$q" "$rq" >/dev/null 2>&1
  sql "$BENCHDB" "drop schema naive cascade" >/dev/null
}

# start_celery LOG: a Celery worker in a session of its own (the cleanup can then kill it
# with its pool) -> CPID, CT0 (exec time, ms)
start_celery() {
  CT0=$(now_ms)
  TP_AMQP=$AMQP TP_PG=$BENCHDB TP_CELERY_QUEUE=tp-celery TP_CELERY_SCHEMA=celery_tp PYTHONPATH=$REPO/bench \
    setsid "$PY" -m celery -A tp_celery worker --pool=prefork --concurrency=2 -Q tp-celery \
    --loglevel=INFO -n "tp-$$@%h" >"$1" 2>&1 </dev/null &
  CPID=$!
  track "$CPID" group
}
celery_pids() { pgrep -P "$CPID"; echo "$CPID"; } # the main process and its pool
celery() {
  local n=${N[celery]} c0 c1 over cpu0 cpu1 ts p rss=0 pss=0 pids
  local -x TP_AMQP=$AMQP TP_PG=$BENCHDB TP_CELERY_QUEUE=tp-celery TP_CELERY_SCHEMA=celery_tp
  fresh_schema celery_tp || { FAIL_REASON="cannot create the schema"; return 1; }
  "$TP" delete "$AMQP" tp-celery >/dev/null 2>&1
  try setup 60 "$LOGS/celery.setup" "$PY" bench/tp_celery.py setup || return 1
  # 1. idle: exec -> "ready.", RSS of the main process + its pool, commits of a start and stop
  c0=$(commits)
  start_celery "$LOGS/celery-idle.log"
  wait_log "$LOGS/celery-idle.log" ' ready\.' "$CPID" 60 || { FAIL_REASON="worker not ready: $(tail -n 1 "$LOGS/celery-idle.log")"; stop "$CPID" 10; return 1; }
  ts=$(sed -n 's/^\[\([0-9-]* [0-9:]*\),\([0-9]*\):.* ready\.$/\1.\2/p' "$LOGS/celery-idle.log" | head -n 1)
  kv celery_start_ms $(($(date -d "$ts" +%s%3N) - CT0))
  sleep 1
  for p in $(celery_pids); do # (pids: no quoting needed)
    rss=$((rss + $(status_kb "$p" VmRSS))) pss=$((pss + $(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup")))
  done
  mapfile -t pids < <(celery_pids)
  cpu0=$(cpu_ticks "${pids[@]}")
  kv celery_rss_kb $rss
  stop "$CPID" 30
  over=$(($(commits) - c0))
  # 2. the run: N tasks queued first, then a worker from scratch; first -> last date_done
  try publish 300 "$LOGS/celery.publish" "$PY" bench/tp_celery.py publish "$n" || return 1
  c0=$(commits)
  meter_begin
  start_celery "$LOGS/celery.log"
  if ! try results $((MAX_S + 30)) "$LOGS/celery.out" "$PY" bench/tp_celery.py collect "$n" 20 "$CT0"; then
    stop "$CPID" 30
    return 1
  fi
  mapfile -t pids < <(celery_pids)
  cpu1=$(cpu_ticks "${pids[@]}")
  stop "$CPID" 30
  c1=$(commits)
  meter_end celery "$n"
  R_SRV[celery]=$(calc "($cpu1 - $cpu0) / $CLK_TCK / $n * 1000" 3)
  R_RATE[celery]=$(kvof "$LOGS/celery.out" rate) R_COMMITS[celery]=$(calc "($c1 - $c0 - $over) / $n" 3)
  kv celery_first_task_ms "$(kvof "$LOGS/celery.out" first_task_ms)"
  kv celery_cpu_s_per_1000 "$(calc "($cpu1 - $cpu0) / $CLK_TCK / $n * 1000" 2)"
  R_NOTE[celery]="N=$n queued first; idle RSS $((rss / 1024)) MB (PSS $((pss / 1024)) MB), 3 processes"
  "$TP" delete "$AMQP" tp-celery >/dev/null 2>&1
  sql "$BENCHDB" "drop schema celery_tp cascade" >/dev/null
}

# ---- rows: the peers -------------------------------------------------------------------------
# graphile-worker on the bench's PostgreSQL, BullMQ on a private Redis (bench/peers/, see the
# head of tp_graphile.js and tp_bullmq.js): N no-op jobs queued first, then one worker process
# from scratch, timed first -> last completion as the Celery row is.
peers_ok() { [ -z "$PEERS_ERR" ] || { FAIL_REASON=$PEERS_ERR; return 1; }; }
# peer_run ROW METER CMD...: start the peer's worker (CMD, N jobs waiting) and wait for its
# result line; it stays up after it, so that METER ROW reads the servers' CPU while its
# connections are still open (as for a mqproc server, before its stop); then stop it.
# -> the row's rate, worker CPU, exec -> first completion, RSS after the run.
peer_run() {
  local row=$1 meter=$2 out=$LOGS/$1.out wpid rss first
  shift 2
  ST0=$(now_ms)
  timeout $((MAX_S + 60)) "$@" >"$out" 2>&1 </dev/null &
  wpid=$!
  track "$wpid"
  if ! wait_log "$out" '^(received|error)' "$wpid" $((MAX_S + 10)) || ! grep -q '^received=' "$out"; then
    FAIL_REASON="worker: $(tail -n 1 "$out")"
    stop "$wpid" 10
    return 1
  fi
  "$meter" "$row"
  rss=$(status_kb "$(pgrep -P "$wpid" | head -n 1)" VmRSS) # (node, the child of timeout)
  stop "$wpid" 10
  R_RATE[$row]=$(kvof "$out" rate) R_SRV[$row]=$(kvof "$out" cpu_s_per_1000)
  first=$(calc "$(kvof "$out" first_ms) - $ST0" 0)
  kv "${row}_first_ms" "$first"
  kv "${row}_rss_kb" "$rss"
  R_NOTE[$row]="N=${N[$row]} queued first; exec -> first completion $first ms, RSS $(calc "${rss:-0} / 1024") MB after the run"
}
graphile_meter() { meter_end "$1" "${N[$1]}" "pg wal"; }
# graphile_row ROW PRESET: schema ROW, PRESET default or batched (tp_graphile.js)
graphile_row() {
  local row=$1 n=${N[$1]} c0 c1 env=()
  peers_ok || return 1
  [ "$2" = batched ] && env=(NO_LOG_SUCCESS=1) # as graphile-worker's own perfTest
  sql "$BENCHDB" "drop schema if exists $row cascade" >/dev/null
  try fill 300 "$LOGS/$row.fill" node "$PEERS/tp_graphile.js" fill "$BENCHDB" "$row" "$n" || return 1
  c0=$(commits)
  meter_begin
  if peer_run "$row" graphile_meter env "${env[@]}" node "$PEERS/tp_graphile.js" work "$BENCHDB" "$row" "$n" "$2" "$MAX_S"; then
    c1=$(commits)
    R_COMMITS[$row]=$(calc "($c1 - $c0) / $n" 3)
  fi
  sql "$BENCHDB" "drop schema $row cascade" >/dev/null
  [ -n "${R_COMMITS[$row]:-}" ]
}
# graphile_latency: the batched preset's pool and a producer in one process (tp_graphile.js
# latency): enqueue -> completion committed at LAT_RATE jobs/s, like the mqproc latency row.
graphile_latency() {
  local row=graphile_lat500 out=$LOGS/graphile_lat500.out sent got
  peers_ok || return 1
  sql "$BENCHDB" "drop schema if exists $row cascade" >/dev/null
  try migrate 60 "$LOGS/$row.fill" node "$PEERS/tp_graphile.js" fill "$BENCHDB" "$row" 0 || return 1
  try latency $((LAT_SECS + LAT_DRAIN + 60)) "$out" env NO_LOG_SUCCESS=1 \
    node "$PEERS/tp_graphile.js" latency "$BENCHDB" "$row" "$LAT_RATE" "$LAT_SECS" "$LAT_DRAIN"
  sql "$BENCHDB" "drop schema $row cascade" >/dev/null
  sent=$(kvof "$out" sent) got=$(kvof "$out" received)
  [ -n "$sent" ] || { FAIL_REASON="latency: $(tail -n 1 "$out")"; return 1; }
  kv "${row}_received" "$got"
  if [ "$got" != "$sent" ]; then
    R_RATE[$row]=n/a R_NOTE[$row]="(cannot keep up: $got of $sent jobs completed by ${LAT_DRAIN}s after the last add)"
    return 0
  fi
  R_RATE[$row]=$LAT_RATE R_NOTE[$row]="p50 $(kvof "$out" p50_ms) ms, p99 $(kvof "$out" p99_ms) ms, max $(kvof "$out" max_ms) ms (N=$sent, addJob each)"
  kv "${row}_p50_ms" "$(kvof "$out" p50_ms)"
  kv "${row}_p99_ms" "$(kvof "$out" p99_ms)"
  kv "${row}_max_ms" "$(kvof "$out" max_ms)"
}

# A private redis-server per BullMQ row: a free loopback port, its own dir and config (AOF
# on with the row's appendfsync; no RDB snapshots and no automatic AOF rewrites, whose fork
# would land in the middle of a row: the AOF of a full row passes the 64 MB at which Redis
# rewrites it) -> REDIS_PID, REDIS_PORT. redis_stop: SIGTERM (it flushes the AOF), remove
# the dir.
REDIS_DIR=$REPO/$BUILD/redis REDIS_PID='' REDIS_PORT=''
redis_start() { # APPENDFSYNC
  local p i
  rm -rf "$REDIS_DIR"
  mkdir -p "$REDIS_DIR"
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 12000))
    [ -z "$(ss -Htan "sport = :$p" 2>/dev/null)" ] && break
  done
  printf '%s\n' "bind 127.0.0.1" "port $p" "dir $REDIS_DIR" "appendonly yes" "appendfsync $1" 'save ""' \
    "auto-aof-rewrite-percentage 0" "daemonize no" "logfile $REDIS_DIR/redis.log" >"$REDIS_DIR/redis.conf"
  redis-server "$REDIS_DIR/redis.conf" >/dev/null 2>&1 </dev/null &
  REDIS_PID=$! REDIS_PORT=$p
  track "$REDIS_PID"
  for ((i = 0; i < 250; i++)); do
    [ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ] && return 0
    running "$REDIS_PID" || break
    sleep 0.02
  done
  FAIL_REASON="redis-server did not start: $(tail -n 1 "$REDIS_DIR/redis.log" 2>/dev/null)"
  redis_stop
  return 1
}
redis_stop() { [ -z "$REDIS_PID" ] || stop "$REDIS_PID" 10; REDIS_PID=; rm -rf "$REDIS_DIR"; }
aof_size() { redis-cli -p "$REDIS_PORT" info persistence | sed -n 's/^aof_current_size:\([0-9]*\).*/\1/p'; }
declare -A REDIS0=()
redis_meter() {
  R_MQ[$1]=$(ms_per_job "$(tree_ticks "$REDIS_PID") - ${REDIS0[cpu]}" "${N[$1]}")
  R_WAL[$1]=$(calc "($(aof_size) - ${REDIS0[aof]}) / ${N[$1]}" 0)
}
# bullmq_row ROW CONCURRENCY APPENDFSYNC
bullmq_row() {
  local row=$1 n=${N[$1]}
  peers_ok || return 1
  command -v redis-server >/dev/null 2>&1 || { FAIL_REASON="redis-server not installed"; return 1; }
  redis_start "$3" || return 1
  if ! try fill 300 "$LOGS/$row.fill" node "$PEERS/tp_bullmq.js" fill "$REDIS_PORT" tp "$n"; then
    redis_stop
    return 1
  fi
  REDIS0[cpu]=$(tree_ticks "$REDIS_PID") REDIS0[aof]=$(aof_size)
  peer_run "$row" redis_meter node "$PEERS/tp_bullmq.js" work "$REDIS_PORT" tp "$n" "$2" "$MAX_S"
  local rc=$?
  redis_stop
  return $rc
}

# ---- rows: mqproc --------------------------------------------------------------------------------
HAS_CONCURRENCY=0
# the whole help first: `| grep -q` would exit at the match and, under pipefail, turn the
# SIGPIPE of a writer still writing into "no --concurrency"
HELP=$("$MQPROC" --help 2>&1 || true)
[[ $HELP == *--concurrency* ]] && HAS_CONCURRENCY=1
# start_server KIND ROW ARGS...: KIND c = the C example processor, exec = mqproc --exec
# /bin/true; queue ocrd-tp-ROW, schema ROW -> SPID, ST0 (exec time, ms), log LOGS/ROW.server
start_server() {
  local kind=$1 row=$2
  shift 2
  local cmd=("$EXAMPLE" processing-server)
  [ "$kind" = c ] || cmd=("$MQPROC" processing-server --exec /bin/true --ocrd-cli=false)
  ST0=$(now_ms)
  "${cmd[@]}" --processor="ocrd-tp-$row" --queue="$AMQP" --database="$(pg_url "$row")" \
    --worker-id="tp-$row" --log-dir="$REPO/$LOGS/joblogs-$row" --shutdown-grace=5 "$@" \
    >"$LOGS/$row.server" 2>&1 </dev/null &
  SPID=$!
  track "$SPID"
}
mqproc_schema() { # ROW: fresh schema with mqproc's tables, fresh queues
  "$TP" delete "$AMQP" "ocrd-tp-$1" "ocrd-tp-$1.dead" "ocrd-tp-$1-results" >/dev/null 2>&1
  fresh_schema "$1" && try migrate 60 "$LOGS/$1.migrate" "$MQPROC" migrate --database="$(pg_url "$1")"
}
mqproc_drop() { # ROW
  "$TP" delete "$AMQP" "ocrd-tp-$1" "ocrd-tp-$1.dead" "ocrd-tp-$1-results" >/dev/null 2>&1
  sql "$BENCHDB" "drop schema if exists $1 cascade" >/dev/null
  rm -rf "${LOGS:?}/joblogs-$1"
}
# Idle server of KIND, once per run: exec -> "consuming from queue" (from its log's
# timestamp), RSS and threads after start, CPU ticks and commits of a start and stop, and
# what PostgreSQL and RabbitMQ spent (ticks) and the WAL written while it started.
declare -A IDLE_CPU=() IDLE_COMMITS=() IDLE_PG=() IDLE_MQ=() IDLE_WAL=()
idle_probe() { # KIND
  local kind=$1 row=idle_$1 c0 ts pre=mqproc_ start rss anon threads
  [ -z "${IDLE_CPU[$kind]:-}" ] || return 0
  [ "$kind" = c ] || pre=mqproc_exec_
  mqproc_schema "$row" || return 1
  c0=$(commits)
  meter_begin
  start_server "$kind" "$row"
  wait_log "$LOGS/$row.server" 'consuming from queue' "$SPID" 30 || { FAIL_REASON="idle server did not start: $(tail -n 1 "$LOGS/$row.server")"; stop "$SPID"; return 1; }
  ts=$(grep -m 1 'consuming from queue' "$LOGS/$row.server" | cut -d' ' -f1)
  sleep 0.5
  start=$(($(date -d "$ts" +%s%3N) - ST0)) rss=$(status_kb "$SPID" VmRSS) threads=$(status_kb "$SPID" Threads)
  anon=$(status_kb "$SPID" RssAnon)
  IDLE_CPU[$kind]=$(cpu_ticks "$SPID")
  meter_delta
  IDLE_PG[$kind]=$D_PG IDLE_MQ[$kind]=$D_MQ IDLE_WAL[$kind]=${D_WAL:-0}
  stop "$SPID"
  IDLE_COMMITS[$kind]=$(($(commits) - c0))
  kv "${pre}start_ms" "$start"
  kv "${pre}rss_kb" "$rss"
  kv "${pre}rss_anon_kb" "$anon"
  kv "${pre}threads" "$threads"
  R_RATE[$row]=- R_NOTE[$row]="RSS $(calc "$rss / 1024") MB ($(calc "$anon / 1024") MB private, the rest shared library pages), $threads threads, exec -> consuming $start ms, start+stop ${IDLE_COMMITS[$kind]} commits"
  mqproc_drop "$row"
}
# mqproc_row ROW KIND SERVER_ARGS...: N jobs (each with a result_queue_name) queued first,
# then a server from scratch; throughput = first -> last result message.
mqproc_row() {
  local row=$1 kind=$2 n=${N[$1]} cpid c0 c1 cpu child per1000 more=
  shift 2
  idle_probe "$kind" || return 1
  mqproc_schema "$row" || return 1
  try publish 300 "$LOGS/$row.fill" "$TP" publish "$AMQP" "ocrd-tp-$row" "$n" 1000 "ocrd-tp-$row-results" || return 1
  timeout $((MAX_S + 30)) "$TP" collect "$AMQP" "ocrd-tp-$row-results" "$n" 20 "$MAX_S" >"$LOGS/$row.out" 2>&1 &
  cpid=$!
  track "$cpid"
  c0=$(commits)
  meter_begin
  start_server "$kind" "$row" "$@"
  reap "$cpid"
  cpu=$(cpu_ticks "$SPID" 2>/dev/null) child=$(child_ticks "$SPID" 2>/dev/null)
  # (before the stop, as the server's CPU: start-up to the last result, less an idle start)
  meter_end "$row" "$n" "pg mq wal" "${IDLE_PG[$kind]}" "${IDLE_MQ[$kind]}" "${IDLE_WAL[$kind]}"
  stop "$SPID"
  c1=$(commits)
  local got ok
  got=$(kvof "$LOGS/$row.out" received) ok=$(kvof "$LOGS/$row.out" success)
  if [ "${got:-0}" != "$n" ] || [ "$ok" != "$n" ]; then
    FAIL_REASON="${got:-0} of $n results (${ok:-0} SUCCESS) within ${MAX_S}s; server: $(tail -n 1 "$LOGS/$row.server")"
    mqproc_drop "$row"
    return 1
  fi
  R_RATE[$row]=$(kvof "$LOGS/$row.out" rate)
  R_COMMITS[$row]=$(calc "($c1 - $c0 - ${IDLE_COMMITS[$kind]}) / $n" 3)
  per1000=$(calc "(${cpu:-0} - ${IDLE_CPU[$kind]}) / $CLK_TCK / $n * 1000" 2)
  kv "${row}_cpu_s_per_1000" "$per1000"
  R_SRV[$row]=$(calc "(${cpu:-0} - ${IDLE_CPU[$kind]}) / $CLK_TCK / $n * 1000" 3)
  if [ "$kind" = exec ]; then
    kv "${row}_child_cpu_s_per_1000" "$(calc "${child:-0} / $CLK_TCK / $n * 1000" 2)"
    more="; its children's CPU $(calc "${child:-0} / $CLK_TCK / $n * 1000" 2) ms/job"
  fi
  kv "${row}_first_ms" "$(calc "$(kvof "$LOGS/$row.out" first_ms) - $ST0" 0)"
  R_NOTE[$row]="N=$n queued first$more"
  mqproc_drop "$row"
}
# latency_row ROW RATE SECS DRAIN PREFETCH: a paced publisher against a running C server.
latency_row() {
  local row=$1 rate=$2 out=$LOGS/$1.out
  mqproc_schema "$row" || return 1
  start_server c "$row" --prefetch="$5"
  wait_log "$LOGS/$row.server" 'consuming from queue' "$SPID" 30 || { FAIL_REASON="server did not start: $(tail -n 1 "$LOGS/$row.server")"; stop "$SPID"; return 1; }
  try latency $(($3 + $4 + 60)) "$out" "$TP" latency "$AMQP" "ocrd-tp-$row" "ocrd-tp-$row-results" "$rate" "$3" "$4"
  stop "$SPID"
  mqproc_drop "$row"
  local sent got
  sent=$(kvof "$out" sent) got=$(kvof "$out" received)
  [ -n "$sent" ] || { FAIL_REASON="latency: $(tail -n 1 "$out")"; return 1; }
  kv "${row}_received" "$got"
  LAT_DONE=$(calc "$got / ($3 + $4)" 1) # what the server completed, at least
  if [ "$got" != "$sent" ]; then
    R_RATE[$row]=n/a R_NOTE[$row]="(cannot keep up: $got of $sent results by ${4}s after the last send, >= $LAT_DONE/s done)"
    return 0
  fi
  R_RATE[$row]=$rate R_NOTE[$row]="p50 $(kvof "$out" p50_ms) ms, p99 $(kvof "$out" p99_ms) ms, max $(kvof "$out" max_ms) ms (prefetch $5, N=$sent)"
  kv "${row}_p50_ms" "$(kvof "$out" p50_ms)"
  kv "${row}_p99_ms" "$(kvof "$out" p99_ms)"
  kv "${row}_max_ms" "$(kvof "$out" max_ms)"
}
latency() {
  local p=64 best=
  # "its best configuration": the faster of the two C rows measured in this run
  if [[ ${R_RATE[mqproc_c_p1]:-} =~ ^[0-9] ]] && [[ ${R_RATE[mqproc_c_p64]:-} =~ ^[0-9] ]]; then
    awk -v a="${R_RATE[mqproc_c_p1]}" -v b="${R_RATE[mqproc_c_p64]}" 'BEGIN { exit !(a > b) }' && p=1
  fi
  best=${R_RATE[mqproc_c_p$p]:-}
  LAT_DONE=
  R_LABEL[lat500]="latency publish->result @${LAT_RATE}/s, C p$p"
  run_row lat500 latency_row lat500 "$LAT_RATE" "$LAT_SECS" "$LAT_DRAIN" "$p"
  [[ $best =~ ^[0-9] ]] || best=$LAT_DONE
  if [[ $best =~ ^[0-9] ]] && [ "$(calc "$best / 2" 0)" -ge 1 ]; then
    local half
    half=$(calc "$best / 2" 0)
    kv lat_half_rate "$half"
    R_LABEL[lat_half]="latency publish->result @${half}/s, C p$p"
    run_row lat_half latency_row lat_half "$half" "$LAT_SECS" "$LAT_DRAIN" "$p"
  fi
}

# ---- run ---------------------------------------------------------------------------------
ORDER=() # rows in table order
run_row() { # run_row ROW FUNC ARGS...
  local row=$1 t
  shift
  ORDER+=("$row")
  FAIL_REASON=
  t=$(now_ms)
  say "row $row"
  if ! "$@"; then
    R_RATE[$row]=FAIL R_NOTE[$row]="(${FAIL_REASON:-failed})"
    say "row $row FAILED: ${FAIL_REASON:-}"
  fi
  say "row $row: ${R_RATE[$row]:-} jobs/s ($(calc "($(now_ms) - $t) / 1000") s)"
}
R_LABEL=([raw_consume_p1]="raw broker consume+ack, prefetch 1"
  [raw_consume_p100]="raw broker consume, prefetch 100, ack/50"
  [raw_publish]="raw broker publish, confirm window 100"
  [raw_publish_w1]="raw broker publish, confirm each (w 1)"
  [raw_relay]="raw broker relay: consume+ack+result"
  [raw_db_1]="raw db claim+complete, 1 job/commit"
  [raw_db_64]="raw db claim+complete, 64 jobs/commit"
  [raw_fork]="raw fork+execve+waitpid /bin/true"
  [naive]="naive Python worker (pika+psycopg2)"
  [celery]="Celery 5.2 prefork c2, acks_late, db"
  [graphile]="graphile-worker${GW_VERSION:+ $GW_VERSION}, its defaults"
  [graphile_batched]="graphile-worker${GW_VERSION:+ $GW_VERSION}, batched preset"
  [bullmq_c1]="BullMQ${BULLMQ_VERSION:+ $BULLMQ_VERSION} c1, AOF always"
  [bullmq_c64]="BullMQ${BULLMQ_VERSION:+ $BULLMQ_VERSION} c64, AOF always"
  [bullmq_c64_everysec]="BullMQ${BULLMQ_VERSION:+ $BULLMQ_VERSION} c64, AOF everysec"
  [graphile_lat500]="latency add->completion @${LAT_RATE}/s, graphile"
  [idle_c]="mqproc C example server, idle"
  [idle_exec]="mqproc --exec server, idle"
  [mqproc_c_p1]="mqproc C example, prefetch 1"
  [mqproc_c_p64]="mqproc C example, prefetch 64"
  [mqproc_c_batched]="mqproc C example, conc. 64, prefetch 256"
  [mqproc_exec_p1]="mqproc --exec /bin/true, prefetch 1"
  [mqproc_exec_c2]="mqproc --exec /bin/true, concurrency 2")
na_concurrency() { R_RATE[$1]="n/a" R_NOTE[$1]="(no --concurrency)"; }

selected raw_consume_p1 && run_row raw_consume_p1 raw_consume raw_consume_p1 1 1
selected raw_consume_p100 && run_row raw_consume_p100 raw_consume raw_consume_p100 100 50
selected raw_publish && run_row raw_publish raw_publish raw_publish 100
selected raw_publish_w1 && run_row raw_publish_w1 raw_publish raw_publish_w1 0
selected raw_relay && run_row raw_relay raw_relay
selected raw_db_1 && run_row raw_db_1 raw_db raw_db_1 1
selected raw_db_64 && run_row raw_db_64 raw_db raw_db_64 64
selected raw_fork && run_row raw_fork raw_fork
selected naive && run_row naive naive
selected celery && run_row celery celery
selected graphile && run_row graphile graphile_row graphile default
selected graphile_batched && run_row graphile_batched graphile_row graphile_batched batched
selected bullmq_c1 && run_row bullmq_c1 bullmq_row bullmq_c1 1 always
selected bullmq_c64 && run_row bullmq_c64 bullmq_row bullmq_c64 64 always
selected bullmq_c64_everysec && run_row bullmq_c64_everysec bullmq_row bullmq_c64_everysec 64 everysec
selected graphile_latency && run_row graphile_lat500 graphile_latency
if selected mqproc_c_p1 || selected mqproc_c_p64 || selected mqproc_c_batched || selected latency; then
  run_row idle_c idle_probe c
fi
if selected mqproc_exec_p1 || selected mqproc_exec_c2; then
  run_row idle_exec idle_probe exec
fi
selected mqproc_c_p1 && run_row mqproc_c_p1 mqproc_row mqproc_c_p1 c --prefetch=1
selected mqproc_c_p64 && run_row mqproc_c_p64 mqproc_row mqproc_c_p64 c --prefetch=64
if selected mqproc_c_batched; then
  if [ $HAS_CONCURRENCY = 1 ]; then
    run_row mqproc_c_batched mqproc_row mqproc_c_batched c --prefetch=256 --concurrency=64
  else ORDER+=(mqproc_c_batched) && na_concurrency mqproc_c_batched; fi
fi
selected mqproc_exec_p1 && run_row mqproc_exec_p1 mqproc_row mqproc_exec_p1 exec --prefetch=1
if selected mqproc_exec_c2; then
  if [ $HAS_CONCURRENCY = 1 ]; then
    run_row mqproc_exec_c2 mqproc_row mqproc_exec_c2 exec --prefetch=2 --concurrency=2
  else ORDER+=(mqproc_exec_c2) && na_concurrency mqproc_exec_c2; fi
fi
selected latency && latency

# ---- rows: the table queues (docs/table-queue.md) ------------------------------------------
# tq_row ROW DB SERVER_ARGS...: the C example with the database as queue and store (DB pg:
# a schema of the bench database; sqlite or sqlite_normal: a file in the build directory,
# synchronous=FULL or NORMAL); N jobs queued first as rows (bench/tp_table.py), then the
# server from scratch; the rate from the first to the last result row's enqueued_at.
tq_url() { case $2 in pg) pg_url "$1" ;; sqlite) echo "sqlite://$REPO/$BUILD/$1.db" ;;
  *) echo "sqlite://$REPO/$BUILD/$1.db?synchronous=normal" ;; esac; }
tq_row() {
  local row=$1 db=$2 n=${N[$1]} url c0 c1 cpu
  shift 2
  url=$(tq_url "$row" "$db")
  rm -f "$BUILD/$row".db*
  [ "$db" != pg ] || fresh_schema "$row" || return 1
  try migrate 60 "$LOGS/$row.migrate" "$MQPROC" migrate --database="$url" || return 1
  try fill 300 "$LOGS/$row.fill" "$PY" bench/tp_table.py fill "$url" "ocrd-tp-$row" "$n" "ocrd-tp-$row-results" || return 1
  c0=$(commits)
  meter_begin
  ST0=$(now_ms)
  "$EXAMPLE" processing-server --processor="ocrd-tp-$row" --queue="$url" --database="$url" \
    --worker-id="tp-$row" --log-dir="$REPO/$LOGS/joblogs-$row" --shutdown-grace=5 "$@" \
    >"$LOGS/$row.server" 2>&1 </dev/null &
  SPID=$!
  track "$SPID"
  try collect $((MAX_S + 30)) "$LOGS/$row.out" "$PY" bench/tp_table.py collect "$url" "ocrd-tp-$row-results" "$n" "$MAX_S"
  cpu=$(cpu_ticks "$SPID" 2>/dev/null)
  meter_end "$row" "$n" "$([ "$db" = pg ] && echo "pg wal" || echo none)"
  stop "$SPID"
  c1=$(commits)
  if [ "$(kvof "$LOGS/$row.out" received)" != "$n" ] || [ "$(kvof "$LOGS/$row.out" success)" != "$n" ]; then
    FAIL_REASON="$(kvof "$LOGS/$row.out" received) of $n results; server: $(tail -n 1 "$LOGS/$row.server")"
    return 1
  fi
  R_RATE[$row]=$(kvof "$LOGS/$row.out" rate)
  [ "$db" != pg ] || R_COMMITS[$row]=$(calc "($c1 - $c0) / $n" 3)
  R_SRV[$row]=$(calc "${cpu:-0} / $CLK_TCK / $n * 1000" 3)
  kv "${row}_cpu_s_per_1000" "${R_SRV[$row]}"
  R_NOTE[$row]="N=$n queued first as rows${*:+; $*}"
  [ "$db" != pg ] || sql "$BENCHDB" "drop schema if exists $row cascade" >/dev/null
  rm -rf "$BUILD/$row".db* "${LOGS:?}/joblogs-$row"
}
# tq_latency_row ROW DB: 500 jobs/s as rows into a running server (prefetch 64)
tq_latency_row() {
  local row=$1 url out=$LOGS/$1.out
  url=$(tq_url "$row" "$2")
  rm -f "$BUILD/$row".db*
  [ "$2" != pg ] || fresh_schema "$row" || return 1
  try migrate 60 "$LOGS/$row.migrate" "$MQPROC" migrate --database="$url" || return 1
  "$EXAMPLE" processing-server --processor="ocrd-tp-$row" --queue="$url" --database="$url" \
    --worker-id="tp-$row" --log-dir="$REPO/$LOGS/joblogs-$row" --prefetch=64 >"$LOGS/$row.server" 2>&1 </dev/null &
  SPID=$!
  track "$SPID"
  wait_log "$LOGS/$row.server" 'consuming from queue' "$SPID" 30 || { FAIL_REASON="server did not start"; stop "$SPID"; return 1; }
  try latency $((LAT_SECS + LAT_DRAIN + 60)) "$out" "$PY" bench/tp_table.py latency "$url" "ocrd-tp-$row" \
    "ocrd-tp-$row-results" "$LAT_RATE" "$LAT_SECS" "$LAT_DRAIN"
  stop "$SPID"
  [ "$2" != pg ] || sql "$BENCHDB" "drop schema if exists $row cascade" >/dev/null
  rm -rf "$BUILD/$row".db* "${LOGS:?}/joblogs-$row"
  [ "$(kvof "$out" received)" = "$(kvof "$out" sent)" ] || { R_RATE[$row]=n/a R_NOTE[$row]="(cannot keep up: $(kvof "$out" received) of $(kvof "$out" sent))"; return 0; }
  R_RATE[$row]=$LAT_RATE R_NOTE[$row]="p50 $(kvof "$out" p50_ms) ms, p99 $(kvof "$out" p99_ms) ms, max $(kvof "$out" max_ms) ms (send -> result committed, prefetch 64)"
  kv "${row}_p50_ms" "$(kvof "$out" p50_ms)"
  kv "${row}_p99_ms" "$(kvof "$out" p99_ms)"
}
R_LABEL+=([tq_pg_p1]="mqproc table queue, PostgreSQL, prefetch 1" [tq_pg_batched]="mqproc table queue, PostgreSQL, batched"
  [tq_sqlite]="mqproc table queue, SQLite FULL, batched" [tq_sqlite_relaxed]="mqproc table queue, SQLite NORMAL, batched"
  [tq_pg_lat500]="latency row->result @${LAT_RATE}/s, table PostgreSQL" [tq_sqlite_lat500]="latency row->result @${LAT_RATE}/s, table SQLite")
selected tq_pg_p1 && run_row tq_pg_p1 tq_row tq_pg_p1 pg --prefetch=1
selected tq_pg_batched && run_row tq_pg_batched tq_row tq_pg_batched pg --concurrency=64 --prefetch=256
selected tq_sqlite && run_row tq_sqlite tq_row tq_sqlite sqlite --concurrency=64 --prefetch=256
selected tq_sqlite_relaxed && run_row tq_sqlite_relaxed tq_row tq_sqlite_relaxed sqlite_normal --concurrency=64 --prefetch=256
selected tq_latency && run_row tq_pg_lat500 tq_latency_row tq_pg_lat500 pg && run_row tq_sqlite_lat500 tq_latency_row tq_sqlite_lat500 sqlite

# The embedded pair: one server on a dir:// queue and an sqlite:// store, no broker or
# database server (bench/embedded.sh: the example C processor, --concurrency 2, results
# to a sibling queue), beside the raw limits of this disk measured by the same script.
embedded() {
  local out=$LOGS/embedded.txt line k
  say "embedded pair (dir:// + sqlite://): bench/embedded.sh"
  if ! env N="$([ $QUICK = 1 ] && echo 1000 || echo 5000)" BIG="$([ $QUICK = 1 ] && echo 0 || echo 1000000)" \
    bash bench/embedded.sh >"$out" 2>"$LOGS/embedded.err"; then
    ORDER+=(mqproc_dir_sqlite)
    R_RATE[mqproc_dir_sqlite]=FAIL R_NOTE[mqproc_dir_sqlite]="(bench/embedded.sh failed: $LOGS/embedded.err)"
    return
  fi
  line=$(grep '^RESULT' "$out" | tail -n 1)
  for k in raw_dir_enqueue raw_dir_claim raw_sqlite_1 raw_sqlite_64 raw_sqlite_normal_1 durable relaxed; do
    local v row=$k
    v=$(sed -n "s/.*\b$k=\([^ ]*\).*/\1/p" <<<"$line")
    case $k in durable) row=mqproc_dir_sqlite ;; relaxed) row=mqproc_dir_sqlite_relaxed ;; esac
    ORDER+=("$row")
    R_RATE[$row]=${v:-n/a}
  done
  R_LABEL[raw_dir_enqueue]="raw dir://: write+fdatasync+rename+dir fsync"
  R_LABEL[raw_dir_claim]="raw dir://: claim+settle (flock, renames)"
  R_LABEL[raw_sqlite_1]="raw SQLite claim+complete, 1/commit, FULL"
  R_LABEL[raw_sqlite_64]="raw SQLite claim+complete, 64/commit, FULL"
  R_LABEL[raw_sqlite_normal_1]="raw SQLite claim+complete, 1/commit, NORMAL"
  R_LABEL[mqproc_dir_sqlite]="mqproc dir+sqlite durable, C, conc 2"
  R_LABEL[mqproc_dir_sqlite_relaxed]="mqproc dir+sqlite ?synchronous=normal"
  R_NOTE[mqproc_dir_sqlite]="$(sed -n 's/.*\bfs=\([^ ]*\).*/on \1/p' <<<"$line"), $(sed -n 's/.*\blat_p99_ms=\([^ ]*\).*/enqueue->claim p99 \1 ms/p' <<<"$line"), $(sed -n 's/.*\bidle_wakeups_per_s=\([^ ]*\).*/idle wake-ups \1\/s/p' <<<"$line"), $(sed -n 's/.*\btakeback_ms=\([^ ]*\).*/kill -9 take-back \1 ms/p' <<<"$line")"
}
selected embedded && embedded

# ---- ratios, table, RESULT ---------------------------------------------------------------
num() { [[ ${1:-} =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
ratio() { num "$1" && num "$2" && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b }'; }
# A row's raw limit: the lower of the database's and the broker's for its mode (the C rows;
# at prefetch 1 the database's is the lower by far), fork+exec for the --exec rows.
lower() { if num "$1" && num "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { print (a < b ? a : b) }'; elif num "$1"; then echo "$1"; else echo "${2:-}"; fi; }
declare -A RAW_RATE=([mqproc_c_p1]=$(lower "${R_RATE[raw_db_1]:-}" "${R_RATE[raw_consume_p1]:-}")
  [mqproc_c_p64]=$(lower "${R_RATE[raw_db_64]:-}" "${R_RATE[raw_relay]:-}")
  [mqproc_c_batched]=$(lower "${R_RATE[raw_db_64]:-}" "${R_RATE[raw_relay]:-}")
  [mqproc_exec_p1]=${R_RATE[raw_fork]:-} [mqproc_exec_c2]=${R_RATE[raw_fork]:-}
  [mqproc_dir_sqlite]=$(lower "${R_RATE[raw_sqlite_64]:-}" "${R_RATE[raw_dir_claim]:-}")
  [mqproc_dir_sqlite_relaxed]=$(lower "${R_RATE[raw_sqlite_normal_1]:-}" "${R_RATE[raw_dir_claim]:-}")
  [tq_pg_p1]=${R_RATE[raw_db_1]:-} [tq_pg_batched]=${R_RATE[raw_db_64]:-}
  [tq_sqlite]=${R_RATE[raw_sqlite_64]:-} [tq_sqlite_relaxed]=${R_RATE[raw_sqlite_normal_1]:-})
# At prefetch 1 the chain is serial: the next delivery comes after the ack, the ack after
# the success commits, the claim after the delivery. The raw database loop and the raw
# consume+ack loop in series are what no server at prefetch 1 can beat on this machine.
if num "${R_RATE[raw_db_1]:-}" && num "${R_RATE[raw_consume_p1]:-}" && num "${R_RATE[mqproc_c_p1]:-}"; then
  P1_CEIL=$(calc "1 / (1 / ${R_RATE[raw_db_1]} + 1 / ${R_RATE[raw_consume_p1]})" 0)
  kv p1_serial_ceiling "$P1_CEIL"
  R_NOTE[mqproc_c_p1]+="; raw db 1/commit and raw consume p1 in series: $P1_CEIL/s ($(ratio "${R_RATE[mqproc_c_p1]}" "$P1_CEIL") of it)"
fi
# The best peer: the highest jobs/s of the peers' rows measured in this run.
BEST_PEER=
for row in "${PEER_ROWS[@]}"; do
  num "${R_RATE[$row]:-}" || continue
  if [ -z "$BEST_PEER" ] || awk -v a="${R_RATE[$row]}" -v b="${R_RATE[$BEST_PEER]}" 'BEGIN { exit !(a > b) }'; then BEST_PEER=$row; fi
done
[ -z "$BEST_PEER" ] || kv best_peer "${R_RATE[$BEST_PEER]}"
for row in "${ORDER[@]}"; do
  case $row in
  mqproc_* | tq_pg_p1 | tq_pg_batched | tq_sqlite | tq_sqlite_relaxed) R_RAW[$row]=$(ratio "${R_RATE[$row]:-}" "${RAW_RATE[$row]:-}")
    [ -z "$BEST_PEER" ] || R_PEER[$row]=$(ratio "${R_RATE[$row]:-}" "${R_RATE[$BEST_PEER]}") ;;
  esac
  case $row in
  mqproc_* | naive) R_CEL[$row]=$(ratio "${R_RATE[$row]:-}" "${R_RATE[celery]:-}") ;;
  esac
done
for row in "${ORDER[@]}"; do
  case $row in idle_* | lat500 | lat_half | graphile_lat500 | tq_*_lat500) continue ;; esac
  kv "$row" "${R_RATE[$row]:-}"
  num "${R_RATE[$row]:-}" || continue # (a failed row's partial figures are left out)
  kv "${row}_commits" "${R_COMMITS[$row]:-}"
  kv "${row}_vs_raw" "${R_RAW[$row]:-}"
  kv "${row}_vs_peer" "${R_PEER[$row]:-}"
  kv "${row}_vs_celery" "${R_CEL[$row]:-}"
  case $row in
  bullmq_*) kv "${row}_redis_cpu_ms" "${R_MQ[$row]:-}"
    kv "${row}_aof_bytes" "${R_WAL[$row]:-}" ;;
  *) kv "${row}_pg_cpu_ms" "${R_PG[$row]:-}"
    kv "${row}_rmq_cpu_ms" "${R_MQ[$row]:-}"
    kv "${row}_wal_bytes" "${R_WAL[$row]:-}" ;;
  esac
  case $row in graphile* | bullmq_*) kv "${row}_cpu_s_per_1000" "${R_SRV[$row]:-}" ;; esac
done
LOAD_END=$(cut -d' ' -f1 /proc/loadavg)
WALL=$(calc "($(now_ms) - $T0) / 1000" 0)
kv loadavg_start "$LOAD_START"
kv loadavg_end "$LOAD_END"
kv wall_s "$WALL"

{
  printf '# mqproc throughput, %s, %s, %d cores, load %s -> %s, %s s%s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
    "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)" "$(nproc)" "$LOAD_START" "$LOAD_END" "$WALL" \
    "$([ $QUICK = 1 ] && echo ', --quick')"
  printf '# PostgreSQL fsync=on synchronous_commit=on; jobs/s of a tool = first -> last result; vs raw: C rows / the lower of raw_db (1 or 64 per commit) and the broker (consume p1, relay), --exec rows / raw_fork; dir+sqlite / the lower of raw SQLite (64/commit FULL; 1/commit NORMAL) and raw dir claim\n'
  printf '# vs peer: / the best peer of this run%s; CPU ms per job of the worker or server process (wrk), PostgreSQL (pg), RabbitMQ (mq; Redis for BullMQ); WAL B: PostgreSQL WAL bytes per job (Redis AOF bytes for BullMQ); peers: graphile-worker %s, BullMQ %s (npm)\n' \
    "${BEST_PEER:+ (${R_LABEL[$BEST_PEER]}, ${R_RATE[$BEST_PEER]}/s)}" "${GW_VERSION:-n/a}" "${BULLMQ_VERSION:-n/a}"
  printf '%-42s %9s %7s %6s %7s %6s %6s %6s %6s %6s  %s\n' row jobs/s commits "vs raw" "vs peer" "vs cel" \
    "wrk ms" "pg ms" "mq ms" "WAL B" notes
  for row in "${ORDER[@]}"; do
    rate=${R_RATE[$row]:-}
    if [ "$rate" = FAIL ] || [ "$rate" = n/a ] && [[ ${R_NOTE[$row]} == "("* ]]; then
      printf '%-42s %s %s\n' "${R_LABEL[$row]:-$row}" "$rate" "${R_NOTE[$row]}"
    else
      printf '%-42s %9s %7s %6s %7s %6s %6s %6s %6s %6s  %s\n' "${R_LABEL[$row]:-$row}" "$rate" \
        "${R_COMMITS[$row]:--}" "${R_RAW[$row]:--}" "${R_PEER[$row]:--}" "${R_CEL[$row]:--}" "${R_SRV[$row]:--}" \
        "${R_PG[$row]:--}" "${R_MQ[$row]:--}" "${R_WAL[$row]:--}" "${R_NOTE[$row]:-}"
    fi
  done
  echo "RESULT ${RESULT[*]}"
} | tee "$BUILD/last.txt"
true # the table was printed: exit 0, whatever its rows say
