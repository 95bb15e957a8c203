#!/usr/bin/env bash
# A 3-node RabbitMQ 3.10 cluster on loopback, for the quorum-queue failover tests
# (tests/integration/test_cluster.c) and bench/chaos.sh. (Recipe and pitfalls:
# shared/notes/scaleout-security.md, section 1.)
#
#   scripts/cluster.sh start DIR          three fresh nodes, clustered; writes DIR/env
#   scripts/cluster.sh stop DIR           stop all nodes and epmd; idempotent
#   scripts/cluster.sh kill DIR N         kill -9 node N (1-3): a crash
#   scripts/cluster.sh start-node DIR N   start node N again with its data (it rejoins)
#   scripts/cluster.sh ctl DIR N ARGS...  rabbitmqctl against node N
#   scripts/cluster.sh leader DIR QUEUE   the number (1-3) of the node leading a quorum queue
#
# Ports from a random base B: node N's AMQP on B+N, its distribution on B+10+N, one shared
# epmd on B+20 (Erlang finds a peer through the epmd on the peer's host at the same port),
# the CLI tools' distribution ports B+30+10(N-1)..+9. DIR/env holds MQPROC_CLUSTER_URLS
# (the three URLs, comma-separated) and MQPROC_CLUSTER_PORT_N.
set -euo pipefail
RMQ_BIN=/usr/lib/rabbitmq/bin
cmd=${1:?usage: cluster.sh start|stop|kill|start-node|ctl|leader DIR ...}
DIR=$(realpath -m "${2:?DIR}")
shift 2

log() { printf 'cluster: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

nodeenv() { # nodeenv N: the environment of node N, for the server and its CLI alike
  local n=$1 D=$DIR/n$1
  export HOME=$DIR/home ERL_EPMD_PORT=$((BASE + 20)) ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_CONF_ENV_FILE=$D/none RABBITMQ_NODENAME=rabbit$n-$BASE@localhost
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$((BASE + n))
  export RABBITMQ_DIST_PORT=$((BASE + 10 + n))
  export RABBITMQ_MNESIA_BASE=$D/mnesia RABBITMQ_LOG_BASE=$D/log RABBITMQ_PID_FILE=$D/beam.pid
  export RABBITMQ_CONFIG_FILE=$D/rabbitmq.conf RABBITMQ_ADVANCED_CONFIG_FILE=$D/advanced.config
  export RABBITMQ_ENABLED_PLUGINS_FILE=$D/enabled_plugins
  # no busy-waiting schedulers: three nodes share two cores
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none'
  export RABBITMQ_CTL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
  export RABBITMQ_CTL_DIST_PORT_MIN=$((BASE + 30 + 10 * (n - 1)))
  export RABBITMQ_CTL_DIST_PORT_MAX=$((BASE + 39 + 10 * (n - 1)))
  unset RABBITMQ_ENABLED_PLUGINS RABBITMQ_USE_LONGNAME
}

ctl() {
  local n=$1
  shift
  (nodeenv "$n" && "$RMQ_BIN/rabbitmqctl" -n "rabbit$n-$BASE@localhost" "$@")
}

start_node() {
  rm -f "$DIR/n$1/beam.pid" # `rabbitmqctl wait` waits for the new one
  (nodeenv "$1" && exec setsid "$RMQ_BIN/rabbitmq-server" </dev/null >>"$DIR/n$1/log/server.out" 2>&1) &
  echo $! >"$DIR/n$1/server.pid"
}

node_pid() { cat "$DIR/n$1/beam.pid" 2>/dev/null || true; }

load() {
  [ -f "$DIR/base" ] || die "no cluster in $DIR (run: cluster.sh start $DIR)"
  BASE=$(cat "$DIR/base")
}

case $cmd in
start)
  t0=$(date +%s%N)
  [ ! -f "$DIR/base" ] || bash "$0" stop "$DIR" || true
  rm -rf "$DIR"
  mkdir -p "$DIR/home"
  for try in $(seq 1 50); do
    BASE=$((20000 + (RANDOM % 200) * 50))
    ok=1
    for p in $(seq $((BASE + 1)) $((BASE + 3))) $(seq $((BASE + 11)) $((BASE + 13))) $((BASE + 20)) \
      $(seq $((BASE + 30)) $((BASE + 59))); do
      port_free "$p" || { ok=0 && break; }
    done
    [ $ok = 1 ] && break
  done
  [ $ok = 1 ] || die "no free ports"
  echo "$BASE" >"$DIR/base"
  head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$DIR/home/.erlang.cookie"
  chmod 400 "$DIR/home/.erlang.cookie"
  (export HOME=$DIR/home && exec setsid epmd -port $((BASE + 20)) -address 127.0.0.1 </dev/null \
    >"$DIR/epmd.out" 2>&1) &
  echo $! >"$DIR/epmd.pid"
  for n in 1 2 3; do
    D=$DIR/n$n
    mkdir -p "$D/mnesia" "$D/log"
    echo '[].' >"$D/enabled_plugins"
    echo '[].' >"$D/advanced.config"
    cat >"$D/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:$((BASE + n))
loopback_users.guest = true
cluster_formation.peer_discovery_backend = classic_config
cluster_formation.classic_config.nodes.1 = rabbit1-$BASE@localhost
cluster_formation.classic_config.nodes.2 = rabbit2-$BASE@localhost
cluster_formation.classic_config.nodes.3 = rabbit3-$BASE@localhost
cluster_formation.discovery_retry_limit = 120
cluster_partition_handling = pause_minority
raft.wal_max_size_bytes = 64000000
EOF
  done
  # all three at once: a blank node keeps looking for its peers (discovery_retry_limit ×
  # 500 ms) before it boots alone, and classic_config's lock orders the joins
  start_node 1
  start_node 2
  start_node 3
  # `wait` (not await_startup, which fails at once while the VM is not up yet)
  ctl 1 wait "$DIR/n1/beam.pid" --timeout 180 >/dev/null ||
    die "node 1 did not start: $(tail -5 "$DIR/n1/log/server.out")"
  ctl 1 await_online_nodes 3 --timeout 180000 >/dev/null || die "the cluster did not form"
  ctl 2 wait "$DIR/n2/beam.pid" --timeout 120 >/dev/null
  ctl 3 wait "$DIR/n3/beam.pid" --timeout 120 >/dev/null
  {
    echo "MQPROC_CLUSTER_DIR='$DIR'"
    echo "MQPROC_CLUSTER_URLS='amqp://guest:guest@127.0.0.1:$((BASE + 1)),amqp://guest:guest@127.0.0.1:$((BASE + 2)),amqp://guest:guest@127.0.0.1:$((BASE + 3))'"
    for n in 1 2 3; do echo "MQPROC_CLUSTER_PORT_$n='$((BASE + n))'"; done
  } >"$DIR/env"
  log "3 nodes on $((BASE + 1))-$((BASE + 3)) in $((($(date +%s%N) - t0) / 1000000)) ms"
  ;;
stop)
  [ -f "$DIR/base" ] || exit 0
  load
  for n in 1 2 3; do
    for f in beam.pid server.pid; do
      pid=$(cat "$DIR/n$n/$f" 2>/dev/null || true)
      [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true
    done
  done
  pid=$(cat "$DIR/epmd.pid" 2>/dev/null || true)
  [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true
  pkill -9 -f "$DIR/n[123]/" 2>/dev/null || true # erl_child_setup and friends
  log "stopped"
  ;;
kill)
  load
  pid=$(node_pid "$1")
  [ -n "$pid" ] || die "node $1 has no pid"
  kill -9 "$pid"
  log "node $1 (pid $pid) killed"
  ;;
start-node)
  load
  start_node "$1"
  ctl "$1" wait "$DIR/n$1/beam.pid" --timeout 120 >/dev/null || die "node $1 did not start again"
  log "node $1 started again"
  ;;
ctl)
  load
  ctl "$@"
  ;;
leader)
  load
  for n in 1 2 3; do # ask any node that answers
    out=$(ctl "$n" list_queues -q name leader 2>/dev/null) || continue
    leader=$(printf '%s\n' "$out" | awk -v q="$1" '$1 == q { print $2 }')
    [ -n "$leader" ] || continue
    echo "$leader" | sed -n "s/^rabbit\([123]\)-$BASE@localhost$/\1/p"
    exit 0
  done
  exit 1
  ;;
*) die "unknown command $cmd" ;;
esac
