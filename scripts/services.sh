#!/usr/bin/env bash
# Private RabbitMQ 3.10 node + PostgreSQL 15 cluster on loopback, for the tests and the demo.
# (Recipe and pitfalls: shared/notes/services.md.)
#
#   scripts/services.sh start [DIR]        fresh servers on free ports; writes DIR/env
#   scripts/services.sh stop [DIR]         stop both (by stored pids); idempotent
#   scripts/services.sh status [DIR]       exit 0 when both are running
#   scripts/services.sh rabbitmq-stop|rabbitmq-start|pg-stop|pg-start [DIR]
#                                          one server only, keeping its data and port
#   scripts/services.sh rabbitmqctl [DIR] ARGS...   /usr/lib/rabbitmq/bin/rabbitmqctl for the node
#   scripts/services.sh psql [DIR] ARGS...          psql on the test database
#
# DIR defaults to $MQPROC_SERVICES_DIR, else <repo>/build/services. All state lives in DIR:
#   DIR/env        KEY='value' lines (MQPROC_TEST_AMQP_URL, MQPROC_TEST_PG_URL, ...)
#   DIR/ports      the ports chosen at start (reused by *-start)
#   DIR/rabbitmq/  config, mnesia, logs, private HOME (.erlang.cookie), epmd/server/beam pids
#   DIR/pg/        data directory (+ unix socket when the path is short enough)
#
# Knobs read by `start`:
#   MQPROC_RMQ_CONSUMER_TIMEOUT_MS  rabbitmq.conf consumer_timeout (unset: broker default, 30 min)
#   MQPROC_RMQ_CHANNEL_TICK_MS      advanced.config channel_tick_interval (unset: 60000); the
#                                   consumer timeout is only checked on this tick
#   MQPROC_RMQ_STATS_INTERVAL_MS    collect_statistics_interval (default 1000, broker's is 5000):
#                                   how often the management API's message counts refresh
#   MQPROC_PG_FAST                  1 (default): fsync/synchronous_commit/full_page_writes off
#   MQPROC_RMQ_START_TIMEOUT        seconds to wait for the broker (default 120)
#   MQPROC_SERVICES_TLS             1: make a throwaway CA (scripts/make-certs.sh, DIR/tls),
#                                   an amqps listener (port +4) and ssl=on in PostgreSQL
#                                   (plain connections still work); 0 (default): no TLS
#   MQPROC_SERVICES_BASE_PORT       try these ports first: RabbitMQ on it (+1..+3, +10..+19),
#                                   PostgreSQL on it +5 (default: random in 20000..31999)
# They are stored in DIR, so rabbitmq-start/pg-start restart with the same configuration.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$SCRIPT_DIR/.." && pwd)
RMQ_BIN=/usr/lib/rabbitmq/bin # NOT /usr/sbin: those wrappers `su rabbitmq` when run as root
PG_BIN=/usr/lib/postgresql/15/bin
PG_DB=mqproc
RMQ_START_TIMEOUT=${MQPROC_RMQ_START_TIMEOUT:-120}

log() { printf 'services: %s\n' "$*"; }
warn() { printf 'services: %s\n' "$*" >&2; }
die() {
  warn "error: $*"
  exit 1
}

now_ms() { date +%s%3N; }
elapsed() { # elapsed START_MS -> "1.23 s"
  local d=$(($(now_ms) - $1))
  printf '%d.%02d s' $((d / 1000)) $((d % 1000 / 10))
}

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1

# ---------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------

# alive PID: the process exists and is not a zombie (init here reaps orphans lazily).
alive() {
  local pid=$1 stat
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  stat=$(ps -o stat= -p "$pid" 2>/dev/null) || return 1
  [[ $stat != Z* ]]
}

# ours PID MARKER: alive, and MARKER occurs in its command line or environment, so that a
# stale pid file never makes us signal a recycled pid that belongs to someone else.
ours() {
  local pid=$1 marker=$2
  alive "$pid" || return 1
  local text
  # (no `| grep -q` here: with pipefail, grep exiting early SIGPIPEs the writer -> false)
  text=$({ tr '\0' '\n' <"/proc/$pid/cmdline" && tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null || true)
  [[ $text == *"$marker"* ]]
}

read_pid() { # read_pid FILE -> pid or empty
  if [ -f "$1" ]; then tr -dc '0-9' <"$1" || true; fi
}

# wait_gone PID SECONDS
wait_gone() {
  local pid=$1 n=$(($2 * 10))
  while [ $n -gt 0 ] && alive "$pid"; do
    sleep 0.1
    n=$((n - 1))
  done
  ! alive "$pid"
}

# stop_pid PID MARKER NAME SECONDS: TERM, wait, KILL — only if the pid is ours.
stop_pid() {
  local pid=$1 marker=$2 name=$3 secs=$4
  [ -n "$pid" ] || return 0
  ours "$pid" "$marker" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" "$secs"; then
    warn "$name (pid $pid) ignored TERM for ${secs}s: KILL"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 5 || warn "$name (pid $pid) still alive"
  fi
}

port_free() { # port_free PORT
  [ -z "$(ss -Htln "sport = :$1" 2>/dev/null)" ]
}

# ---------------------------------------------------------------------------------------
# DIR, ports
# ---------------------------------------------------------------------------------------

set_dir() { # set_dir [DIR] [create]
  local d=${1:-${MQPROC_SERVICES_DIR:-$REPO_DIR/build/services}}
  [ "${2:-}" != create ] || mkdir -p "$d"
  if [ -d "$d" ]; then
    DIR=$(cd "$d" && pwd -P)
  else
    case $d in /*) DIR=$d ;; *) DIR=$PWD/$d ;; esac
  fi
  RDIR=$DIR/rabbitmq
  PDIR=$DIR/pg
}

load_ports() {
  [ -f "$DIR/ports" ] || return 1
  # shellcheck disable=SC1091
  . "$DIR/ports"
  [ -n "${RMQ_PORT:-}" ] && [ -n "${PG_PORT:-}" ]
}

# Ports: RabbitMQ P (AMQP), P+1 (distribution), P+2 (epmd), P+3 (management),
# P+10..P+19 (CLI tools' distribution); PostgreSQL Q. Picked below the ephemeral range.
ports_free() {
  local p
  for p in $(seq "$1" $(($1 + 4))) $(seq $(($1 + 10)) $(($1 + 19))) "$2"; do
    port_free "$p" || return 1
  done
}

pick_ports() { # pick_ports ATTEMPT
  local try base pg
  for try in $(seq 1 100); do
    base=$((20000 + (RANDOM % 600) * 20)) # 20000..31980, step 20
    if [ "$try" = 1 ] && [ "${1:-1}" = 1 ] && [ -n "${MQPROC_SERVICES_BASE_PORT:-}" ]; then
      base=$MQPROC_SERVICES_BASE_PORT # fixed ports wanted (used when free)
    fi
    pg=$((base + 5))                      # inside our block, unused by RabbitMQ
    if ports_free "$base" "$pg"; then
      RMQ_PORT=$base
      PG_PORT=$pg
      return 0
    fi
  done
  die "no free ports found after $try tries"
}

derive_ports() {
  RMQ_DIST_PORT=$((RMQ_PORT + 1))
  EPMD_PORT=$((RMQ_PORT + 2))
  RMQ_MGMT_PORT=$((RMQ_PORT + 3))
  AMQPS_PORT=$((RMQ_PORT + 4))
  TLS_DIR=$DIR/tls
  RMQ_NODE=rmq$RMQ_PORT@localhost
  AMQP_URL=amqp://guest:guest@127.0.0.1:$RMQ_PORT
  PG_URL=postgresql://postgres@127.0.0.1:$PG_PORT/$PG_DB
  MGMT_URL=http://127.0.0.1:$RMQ_MGMT_PORT
}

# The knobs a start was made with; a running pair with other settings is not reused.
wanted_config() {
  printf 'ct=%s;tick=%s;stats=%s;pgfast=%s;tls=%s' "${MQPROC_RMQ_CONSUMER_TIMEOUT_MS:-}" \
    "${MQPROC_RMQ_CHANNEL_TICK_MS:-}" "${MQPROC_RMQ_STATS_INTERVAL_MS:-1000}" "${MQPROC_PG_FAST:-1}" \
    "${MQPROC_SERVICES_TLS:-0}"
}

write_ports() {
  printf "RMQ_PORT=%s\nPG_PORT=%s\nCONFIG='%s'\n" "$RMQ_PORT" "$PG_PORT" "$(wanted_config)" >"$DIR/ports"
}

shq() { # single-quote for sh
  printf "'%s'" "${1//\'/\'\\\'\'}"
}

write_env() {
  local tmp=$DIR/env.tmp
  {
    echo "# written by scripts/services.sh start; source with: set -a; . $(shq "$DIR/env"); set +a"
    printf 'MQPROC_SERVICES_DIR=%s\n' "$(shq "$DIR")"
    printf 'MQPROC_TEST_AMQP_URL=%s\n' "$(shq "$AMQP_URL")"
    printf 'MQPROC_TEST_PG_URL=%s\n' "$(shq "$PG_URL")"
    printf 'MQPROC_TEST_RMQ_PORT=%s\n' "$(shq "$RMQ_PORT")"
    printf 'MQPROC_TEST_RMQ_MGMT_URL=%s\n' "$(shq "$MGMT_URL")"
    printf 'MQPROC_TEST_RMQ_MGMT_PORT=%s\n' "$(shq "$RMQ_MGMT_PORT")"
    printf 'MQPROC_TEST_RMQ_NODE=%s\n' "$(shq "$RMQ_NODE")"
    printf 'MQPROC_TEST_RMQ_CONSUMER_TIMEOUT_MS=%s\n' "$(shq "${MQPROC_RMQ_CONSUMER_TIMEOUT_MS:-}")"
    printf 'MQPROC_TEST_RMQ_CHANNEL_TICK_MS=%s\n' "$(shq "${MQPROC_RMQ_CHANNEL_TICK_MS:-}")"
    printf 'MQPROC_TEST_PG_PORT=%s\n' "$(shq "$PG_PORT")"
    printf 'MQPROC_TEST_PG_HOST=%s\n' "'127.0.0.1'"
    printf 'MQPROC_TEST_PG_DB=%s\n' "$(shq "$PG_DB")"
    if [ "${MQPROC_SERVICES_TLS:-0}" = 1 ]; then
      printf 'MQPROC_TEST_TLS_DIR=%s\n' "$(shq "$TLS_DIR")"
      printf 'MQPROC_TEST_AMQPS_PORT=%s\n' "$(shq "$AMQPS_PORT")"
    fi
  } >"$tmp"
  mv -f "$tmp" "$DIR/env"
}

# ---------------------------------------------------------------------------------------
# RabbitMQ
# ---------------------------------------------------------------------------------------

rmq_env() {
  export HOME=$RDIR/home # private .erlang.cookie shared by the node and the CLI tools
  export RABBITMQ_CONF_ENV_FILE=$RDIR/no-rabbitmq-env.conf
  export RABBITMQ_NODENAME=$RMQ_NODE RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT=$RMQ_PORT RABBITMQ_DIST_PORT=$RMQ_DIST_PORT
  export ERL_EPMD_PORT=$EPMD_PORT ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_MNESIA_BASE=$RDIR/mnesia RABBITMQ_LOG_BASE=$RDIR/log
  export RABBITMQ_CONFIG_FILE=$RDIR/rabbitmq.conf
  export RABBITMQ_ADVANCED_CONFIG_FILE=$RDIR/advanced.config
  export RABBITMQ_ENABLED_PLUGINS_FILE=$RDIR/enabled_plugins
  export RABBITMQ_PID_FILE=$RDIR/beam.pid
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
  export RABBITMQ_CTL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
  export RABBITMQ_CTL_DIST_PORT_MIN=$((RMQ_PORT + 10)) RABBITMQ_CTL_DIST_PORT_MAX=$((RMQ_PORT + 19))
  unset RABBITMQ_ENABLED_PLUGINS RABBITMQ_USE_LONGNAME
}

rmq_running() {
  local pid
  pid=$(read_pid "$RDIR/beam.pid")
  [ -n "$pid" ] && ours "$pid" "$RDIR/" && return 0
  pid=$(read_pid "$RDIR/server.pid")
  [ -n "$pid" ] && ours "$pid" "$RDIR/"
}

rmq_config() {
  local ct=${MQPROC_RMQ_CONSUMER_TIMEOUT_MS:-} tick=${MQPROC_RMQ_CHANNEL_TICK_MS:-}
  local stats=${MQPROC_RMQ_STATS_INTERVAL_MS:-1000}
  [[ $stats =~ ^[1-9][0-9]*$ ]] ||
    die "MQPROC_RMQ_STATS_INTERVAL_MS must be a positive integer (ms), got '$stats'"
  [ -z "$ct" ] || [[ $ct =~ ^[1-9][0-9]*$ ]] ||
    die "MQPROC_RMQ_CONSUMER_TIMEOUT_MS must be a positive integer (ms), got '$ct'"
  [ -z "$tick" ] || [[ $tick =~ ^[1-9][0-9]*$ ]] ||
    die "MQPROC_RMQ_CHANNEL_TICK_MS must be a positive integer (ms), got '$tick'"
  mkdir -p "$RDIR/mnesia" "$RDIR/log" "$RDIR/home"
  chmod 700 "$RDIR/home"
  {
    echo "listeners.tcp.1 = 127.0.0.1:$RMQ_PORT"
    echo "loopback_users.guest = true"
    echo "management.tcp.port = $RMQ_MGMT_PORT"
    echo "management.tcp.ip = 127.0.0.1"
    # fresher message counts in the management API (default 5000 ms)
    echo "collect_statistics_interval = $stats"
    [ -z "$ct" ] || echo "consumer_timeout = $ct"
    if [ "${MQPROC_SERVICES_TLS:-0}" = 1 ]; then
      echo "listeners.ssl.1 = 127.0.0.1:$AMQPS_PORT"
      echo "ssl_options.cacertfile = $TLS_DIR/ca.pem"
      echo "ssl_options.certfile = $TLS_DIR/server.pem"
      echo "ssl_options.keyfile = $TLS_DIR/server.key"
      echo "ssl_options.verify = verify_peer"            # a client certificate is checked...
      echo "ssl_options.fail_if_no_peer_cert = false"    # ...when one is given
    fi
  } >"$RDIR/rabbitmq.conf"
  if [ -n "$tick" ]; then
    echo "[{rabbit, [{channel_tick_interval, $tick}]}]." >"$RDIR/advanced.config"
  else
    echo "[]." >"$RDIR/advanced.config"
  fi
  echo "[rabbitmq_management]." >"$RDIR/enabled_plugins"
}

# Launch epmd + the node in the background (does not wait for readiness).
rmq_launch() {
  local n epmd_pid server_pid
  rmq_env
  : >"$RDIR/log/server.out"
  rm -f "$RDIR/beam.pid"
  # Our own epmd, not daemonised, so we own its pid (else rabbitmq's CLI daemonises one).
  setsid epmd -port "$EPMD_PORT" -address 127.0.0.1 </dev/null >>"$RDIR/log/epmd.out" 2>&1 9>&- &
  epmd_pid=$!
  echo "$epmd_pid" >"$RDIR/epmd.pid"
  n=50
  while port_free "$EPMD_PORT"; do
    alive "$epmd_pid" || {
      cat "$RDIR/log/epmd.out" >&2
      return 1
    }
    n=$((n - 1))
    [ $n -gt 0 ] || return 1
    sleep 0.1
  done
  setsid "$RMQ_BIN/rabbitmq-server" </dev/null >>"$RDIR/log/server.out" 2>&1 9>&- &
  server_pid=$!
  echo "$server_pid" >"$RDIR/server.pid"
}

# Wait until an AMQP publish works and the management API answers.
rmq_wait() {
  local t0 deadline pid
  t0=$(now_ms)
  deadline=$((SECONDS + RMQ_START_TIMEOUT))
  pid=$(read_pid "$RDIR/server.pid")
  until amqp-publish -u "$AMQP_URL" -r mqproc-services-probe -b x >/dev/null 2>&1; do
    if ! alive "$pid"; then
      warn "rabbitmq-server exited during startup (log: $RDIR/log/server.out)"
      RMQ_DIED=1
      return 1
    fi
    [ $SECONDS -lt $deadline ] || {
      warn "rabbitmq not ready after ${RMQ_START_TIMEOUT}s; see $RDIR/log/"
      tail -n 25 "$RDIR/log/server.out" >&2 || true
      return 1
    }
    sleep 0.2
  done
  until curl -fsS -o /dev/null -u guest:guest "$MGMT_URL/api/overview" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || {
      warn "rabbitmq management API not answering at $MGMT_URL"
      return 1
    }
    sleep 0.2
  done
  log "rabbitmq ready on $AMQP_URL (management $MGMT_URL) in $(elapsed "$t0")"
}

rmq_stop() {
  local t0 server_pid beam_pid epmd_pid
  [ -d "$RDIR" ] || return 0
  load_ports || return 0
  derive_ports
  t0=$(now_ms)
  server_pid=$(read_pid "$RDIR/server.pid")
  beam_pid=$(read_pid "$RDIR/beam.pid")
  epmd_pid=$(read_pid "$RDIR/epmd.pid")
  local any=0
  for p in "$server_pid" "$beam_pid" "$epmd_pid"; do
    [ -n "$p" ] && alive "$p" && any=1
  done
  [ $any = 1 ] || {
    rm -f "$RDIR/server.pid" "$RDIR/beam.pid" "$RDIR/epmd.pid"
    return 0
  }
  if { [ -n "$beam_pid" ] && ours "$beam_pid" "$RDIR/"; } ||
    { [ -n "$server_pid" ] && ours "$server_pid" "$RDIR/"; }; then
    # Graceful stop (what `rabbitmqctl shutdown` does), minus a fixed 5 s: on stop the
    # management agent's event handler forces an event refresh that times out while the
    # queues are going down. Removing that handler first brings the stop from ~8 s to ~3 s.
    # The node waits for that removal 3 s at most. The CLI takes ~1 s on a quiet machine;
    # on a loaded one (three 64-slot servers on 2 cores) it did not reach the node in 35 s
    # and ignored TERM (a stop took 105 s), so it gets 10 s, then KILL, then the signals
    # below (the node stops on SIGTERM too, in ~8 s). Needs our epmd: epmd is stopped last.
    if (rmq_env && timeout -k 2 10 "$RMQ_BIN/rabbitmqctl" -q -n "$RMQ_NODE" eval \
      'spawn(fun() -> Stopper = self(),
         spawn(fun() -> catch gen_event:delete_handler(rabbit_event, rabbit_mgmt_db_handler, []),
                        Stopper ! handler_gone end),
         receive handler_gone -> ok after 3000 -> ok end,
         rabbit:stop_and_halt() end), ok.' >/dev/null 2>&1 9>&-); then
      log "rabbitmq asked to stop after $(elapsed "$t0")"
      if [ -n "$beam_pid" ] && ! wait_gone "$beam_pid" 60; then
        warn "rabbitmq (beam pid $beam_pid) did not stop within 60 s"
      fi
    else # e.g. our epmd was killed, or the CLI was too slow: signals below
      log "rabbitmqctl did not ask the node to stop (after $(elapsed "$t0")): stopping it by signal"
    fi
  fi
  stop_pid "$server_pid" "$RDIR/" rabbitmq-server 30 # the sh wrapper traps TERM
  stop_pid "$beam_pid" "$RDIR/" beam.smp 10
  stop_pid "$epmd_pid" "$RDIR/" epmd 5
  # Safety net: an epmd on our private port that someone (a CLI call) daemonised.
  if ! port_free "$EPMD_PORT"; then
    epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1 || true
  fi
  rm -f "$RDIR/server.pid" "$RDIR/beam.pid" "$RDIR/epmd.pid"
  log "rabbitmq stopped in $(elapsed "$t0")"
}

# ---------------------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------------------

as_pg() { # run a server-side pg command as the postgres user when we are root
  if [ $IS_ROOT = 1 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

pg_pidfile_pid() {
  if [ -f "$PDIR/data/postmaster.pid" ]; then
    head -n 1 "$PDIR/data/postmaster.pid" | tr -dc '0-9' || true
  fi
}

pg_running() {
  local pid
  pid=$(pg_pidfile_pid)
  [ -n "$pid" ] && ours "$pid" "$PDIR/data"
}

# As root, postgres must be able to traverse every parent of DIR (pitfall: 0700 mktemp dirs).
pg_fix_traversal() {
  [ $IS_ROOT = 1 ] || return 0
  local d='' part
  local -a parts
  IFS=/ read -r -a parts <<<"${DIR#/}"
  for part in "${parts[@]}"; do # top-down, so only the real blockers get changed
    d=$d/$part
    if ! runuser -u postgres -- test -x "$d" 2>/dev/null; then
      log "chmod o+x $d (postgres must traverse it)"
      chmod o+x "$d"
    fi
  done
}

pg_init() {
  local sockdir fast=${MQPROC_PG_FAST:-1}
  mkdir -p "$PDIR"
  if [ $IS_ROOT = 1 ]; then
    pg_fix_traversal
    chown postgres: "$PDIR"
  fi
  as_pg "$PG_BIN/initdb" -D "$PDIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
    --no-sync --no-instructions >"$DIR/pg-initdb.log" 2>&1 9>&- || {
    cat "$DIR/pg-initdb.log" >&2
    return 1
  }
  if [ "${MQPROC_SERVICES_TLS:-0}" = 1 ]; then # the server's own copies, owned by it, 0600
    local own=()
    [ $IS_ROOT = 1 ] && own=(-o postgres -g postgres)
    install "${own[@]}" -m 600 "$TLS_DIR/server.key" "$PDIR/data/server.key"
    install "${own[@]}" -m 644 "$TLS_DIR/server.pem" "$PDIR/data/server.crt"
    install "${own[@]}" -m 644 "$TLS_DIR/ca.pem" "$PDIR/data/root.crt"
  fi
  # Unix socket path must fit in sun_path (107 bytes): DIR/pg/.s.PGSQL.NNNNN
  sockdir=$PDIR
  if [ ${#sockdir} -gt $((107 - 17)) ]; then
    log "DIR is too long for a unix socket: PostgreSQL is TCP-only"
    sockdir=
  fi
  {
    echo "# --- scripts/services.sh"
    echo "port = $PG_PORT"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$sockdir'"
    echo "max_connections = 200"
    if [ "${MQPROC_SERVICES_TLS:-0}" = 1 ]; then
      echo "ssl = on"
      echo "ssl_cert_file = 'server.crt'"
      echo "ssl_key_file = 'server.key'"
      echo "ssl_ca_file = 'root.crt'"
    fi
    if [ "$fast" = 1 ]; then
      echo "fsync = off"
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
    fi
  } | as_pg tee -a "$PDIR/data/postgresql.conf" >/dev/null
}

pg_launch() {
  local pid
  pid=$(pg_pidfile_pid)
  if [ -n "$pid" ] && ! ours "$pid" "$PDIR/data"; then
    # Stale (killed / machine restarted). Postgres itself would refuse to start while the
    # dead postmaster is still a zombie (kill(pid, 0) succeeds on zombies): clean up here.
    rm -f "$PDIR/data/postmaster.pid" "$PDIR/.s.PGSQL.$PG_PORT.lock" "$PDIR/.s.PGSQL.$PG_PORT"
  fi
  as_pg "$PG_BIN/pg_ctl" -D "$PDIR/data" -l "$PDIR/data/postgres.log" -w -t 60 -s start \
    </dev/null >/dev/null 2>"$DIR/pg-ctl.err" 9>&- || {
    warn "pg_ctl start failed:"
    cat "$DIR/pg-ctl.err" >&2
    tail -n 20 "$PDIR/data/postgres.log" >&2 || true
    return 1
  }
}

pg_wait() {
  local n=300
  until psql "postgresql://postgres@127.0.0.1:$PG_PORT/postgres" -XAtqc 'select 1' >/dev/null 2>&1; do
    n=$((n - 1))
    [ $n -gt 0 ] || {
      warn "postgres not answering on port $PG_PORT"
      return 1
    }
    sleep 0.2
  done
}

pg_start_fresh() {
  local t0
  t0=$(now_ms)
  if ! { pg_init && pg_launch && pg_wait; }; then
    return 1
  fi
  psql "postgresql://postgres@127.0.0.1:$PG_PORT/postgres" -XAtqc "create database $PG_DB" >/dev/null ||
    return 1
  psql "$PG_URL" -XAtqc 'select 1' >/dev/null || return 1
  log "postgres ready on $PG_URL in $(elapsed "$t0")"
}

pg_stop() {
  local t0 pid
  [ -d "$PDIR/data" ] || return 0
  pid=$(pg_pidfile_pid)
  [ -n "$pid" ] || return 0
  if ! ours "$pid" "$PDIR/data"; then
    rm -f "$PDIR/data/postmaster.pid"
    return 0
  fi
  t0=$(now_ms)
  as_pg "$PG_BIN/pg_ctl" -D "$PDIR/data" -m fast -w -t 30 -s stop >/dev/null 2>&1 9>&- || true
  if ours "$pid" "$PDIR/data"; then
    stop_pid "$pid" "$PDIR/data" postgres 10
  fi
  wait_gone "$pid" 5 || true
  log "postgres stopped in $(elapsed "$t0")"
}

# ---------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------

lock_dir() {
  exec 9>"$DIR/.lock"
  flock -w 300 9 || die "could not lock $DIR/.lock"
}

cmd_stop() {
  local t0
  t0=$(now_ms)
  lock_dir
  rmq_stop
  pg_stop
  log "stopped ($DIR) in $(elapsed "$t0")"
}

fail_start() {
  warn "start failed; stopping what was started"
  rmq_stop || true
  pg_stop || true
}

# Was the failure a port collision (someone took a port between check and bind)?
port_collision() {
  grep -qsiE 'eaddrinuse|address already in use|already in use' \
    "$RDIR/log/server.out" "$RDIR/log/epmd.out" "$PDIR/data/postgres.log" "$DIR/pg-ctl.err"
}

cmd_start() {
  local t0 attempt
  t0=$(now_ms)
  lock_dir
  CONFIG=
  if load_ports && rmq_running && pg_running && [ "$CONFIG" = "$(wanted_config)" ]; then
    derive_ports
    log "already running in $DIR"
    [ -f "$DIR/env" ] || write_env
    echo "MQPROC_TEST_AMQP_URL=$AMQP_URL"
    echo "MQPROC_TEST_PG_URL=$PG_URL"
    return 0
  fi
  # Leftovers of a previous (killed) run, or a running pair with other settings: stop them
  # by their stored pids, then start afresh.
  if load_ports; then
    derive_ports
    if rmq_running || pg_running; then
      if [ "$CONFIG" != "$(wanted_config)" ]; then
        log "running with other settings ($CONFIG); restarting"
      else
        log "cleaning up a previous run in $DIR"
      fi
    fi
    rmq_stop
    pg_stop
  fi
  for attempt in 1 2 3; do
    rm -rf "$RDIR" "$PDIR" "$DIR/env" "$DIR/ports" "$DIR"/pg-*.log "$DIR"/pg-*.err
    pick_ports "$attempt"
    derive_ports
    write_ports
    log "starting in $DIR (attempt $attempt): rabbitmq $RMQ_PORT (mgmt $RMQ_MGMT_PORT, epmd $EPMD_PORT), postgres $PG_PORT"
    if [ "${MQPROC_SERVICES_TLS:-0}" = 1 ]; then
      rm -rf "$TLS_DIR"
      bash "$SCRIPT_DIR/make-certs.sh" "$TLS_DIR" || die "cannot make the test certificates"
      log "TLS: test CA in $TLS_DIR, amqps on $AMQPS_PORT, postgres ssl=on"
    fi
    rmq_config
    # Overlap the boots: the broker needs ~5 s, postgres ~1 s.
    if rmq_launch && pg_start_fresh && rmq_wait; then
      write_env
      log "started in $(elapsed "$t0"); env: $DIR/env"
      echo "MQPROC_TEST_AMQP_URL=$AMQP_URL"
      echo "MQPROC_TEST_PG_URL=$PG_URL"
      return 0
    fi
    if port_collision; then
      warn "port collision; retrying with other ports"
      fail_start
      continue
    fi
    if [ "${RMQ_DIED:-0}" = 1 ]; then
      warn "last lines of $RDIR/log/server.out:"
      tail -n 30 "$RDIR/log/server.out" >&2 || true
    fi
    fail_start
    die "could not start the services (logs in $DIR)"
  done
  die "could not start the services after 3 attempts (port collisions)"
}

need_state() {
  load_ports || die "no services state in $DIR (run: $0 start $DIR)"
  derive_ports
}

cmd_status() {
  local rc=0
  if ! load_ports; then
    echo "services: not started in $DIR"
    return 3
  fi
  derive_ports
  if rmq_running; then
    echo "rabbitmq: running  $AMQP_URL  management $MGMT_URL  node $RMQ_NODE (pid $(read_pid "$RDIR/beam.pid"))"
  else
    echo "rabbitmq: stopped  (port $RMQ_PORT)"
    rc=3
  fi
  if pg_running; then
    echo "postgres: running  $PG_URL (pid $(pg_pidfile_pid))"
  else
    echo "postgres: stopped  (port $PG_PORT)"
    rc=3
  fi
  return $rc
}

cmd_rmq_stop() {
  lock_dir
  need_state
  rmq_stop
}

cmd_rmq_start() {
  local t0
  t0=$(now_ms)
  lock_dir
  need_state
  [ -f "$RDIR/rabbitmq.conf" ] || die "no rabbitmq config in $RDIR (run: $0 start)"
  if rmq_running; then
    log "rabbitmq already running on $AMQP_URL"
    return 0
  fi
  rmq_stop # leftovers (epmd) of a killed node
  for p in "$RMQ_PORT" "$RMQ_DIST_PORT" "$EPMD_PORT" "$RMQ_MGMT_PORT"; do
    port_free "$p" || die "port $p is in use by another process; cannot restart rabbitmq on it"
  done
  rmq_launch || die "could not launch rabbitmq"
  rmq_wait || {
    [ "${RMQ_DIED:-0}" != 1 ] || tail -n 30 "$RDIR/log/server.out" >&2 || true
    rmq_stop
    die "rabbitmq did not come back"
  }
  log "rabbitmq restarted in $(elapsed "$t0")"
}

cmd_pg_stop() {
  lock_dir
  need_state
  pg_stop
}

cmd_pg_start() {
  local t0
  t0=$(now_ms)
  lock_dir
  need_state
  [ -f "$PDIR/data/PG_VERSION" ] || die "no postgres data in $PDIR (run: $0 start)"
  if pg_running; then
    log "postgres already running on $PG_URL"
    return 0
  fi
  port_free "$PG_PORT" || die "port $PG_PORT is in use by another process"
  if ! { pg_launch && pg_wait; }; then
    die "postgres did not come back"
  fi
  log "postgres restarted in $(elapsed "$t0")"
}

cmd_rabbitmqctl() {
  need_state
  rmq_env
  exec "$RMQ_BIN/rabbitmqctl" -n "$RMQ_NODE" "$@"
}

cmd_psql() {
  need_state
  exec psql "$PG_URL" "$@"
}

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}

# Servers started here must not keep the caller's other descriptors (a test harness's pipes,
# sockets) open for their whole life: close everything but 0, 1, 2 (and bash's 255).
close_inherited_fds() {
  local f fd
  for f in "/proc/$$/fd"/*; do
    fd=${f##*/}
    if [[ $fd =~ ^[0-9]+$ ]] && [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then
      eval "exec $fd>&-" 2>/dev/null || true
    fi
  done
}

main() {
  local cmd=${1:-}
  [ $# -gt 0 ] && shift
  case $cmd in
  start | stop | status | rabbitmq-stop | rabbitmq-start | pg-stop | pg-start)
    [ $# -le 1 ] || die "usage: $0 $cmd [DIR]"
    if [ "$cmd" = start ]; then
      set_dir "${1:-}" create
    else
      set_dir "${1:-}"
      [ -d "$DIR" ] || {
        [ "$cmd" = stop ] && return 0
        [ "$cmd" = status ] && echo "services: not started in $DIR" && return 3
        die "no services state in $DIR (run: $0 start $DIR)"
      }
    fi
    ;;
  rabbitmqctl | psql)
    # Optional DIR first: taken as DIR when it is an existing directory.
    if [ $# -gt 0 ] && [ "$1" = -- ]; then
      shift
      set_dir ""
    elif [ $# -gt 0 ] && [ -d "$1" ]; then
      set_dir "$1"
      shift
      [ "${1:-}" != -- ] || shift
    else
      set_dir ""
    fi
    ;;
  -h | --help | help)
    usage
    return 0
    ;;
  *)
    usage >&2
    return 2
    ;;
  esac
  case $cmd in
  start | stop | rabbitmq-start | rabbitmq-stop | pg-start | pg-stop) close_inherited_fds ;;
  esac
  case $cmd in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  rabbitmq-stop) cmd_rmq_stop ;;
  rabbitmq-start) cmd_rmq_start ;;
  pg-stop) cmd_pg_stop ;;
  pg-start) cmd_pg_start ;;
  rabbitmqctl) cmd_rabbitmqctl "$@" ;;
  psql) cmd_psql "$@" ;;
  esac
}

main "$@"
