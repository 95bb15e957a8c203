#!/usr/bin/env bash
# Chaos benchmark: N jobs through M mqproc processing servers while servers are killed
# (-9) and RabbitMQ and PostgreSQL are restarted; then checks that every job ended exactly
# once and counts duplicates. Not part of the test suite. See bench/README.md.
#
#   bash bench/chaos.sh [--jobs 2000] [--servers 3] [--kills 10] [--broker-restarts 1]
#                       [--db-restarts 1] [--job-ms 50..400] [--seed N] [--timeout 900]
#                       [--backend amqp+postgresql|dir+sqlite|pg|sqlite] [--cluster 3]
#                       [--mqproc PATH] [--server-arg ARG]...
#
#   --backend B        amqp+postgresql (default): private RabbitMQ and PostgreSQL;
#                      dir+sqlite: a dir:// queue and an sqlite:// store in the log
#                      directory, no servers (so no broker or database restarts: kills only);
#                      pg: the private PostgreSQL as queue and store, one database
#                      (docs/table-queue.md; no broker: kills and database restarts);
#                      sqlite: an sqlite:// file as queue and store (kills only)
#   --cluster 3        amqp+postgresql on a 3-node RabbitMQ cluster (scripts/cluster.sh): the
#                      servers get the list of all nodes and --queue-type=quorum, the results
#                      a quorum queue; each "broker restart" kills a random node (-9) and
#                      starts it again after 2-6 s
#   --mqproc PATH      use this mqproc binary instead of building build/bench/mqproc
#   --server-arg ARG   extra argument for every processing server (repeatable),
#                      e.g. --server-arg=--ack-after=2
#   --timeout S        give up waiting for the jobs after S seconds (default 900)
#
# Exit status: 0 when no job was lost and no job has two SUCCESS results (two result
# messages that differ in message_id or x-mqproc-attempt; a re-send of the same result is
# counted apart, as consumers drop it by its message_id);
# 1 otherwise (or on timeout); 2 on a usage or setup error.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD

JOBS=2000 SERVERS=3 KILLS=10 BROKER_RESTARTS=1 DB_RESTARTS=1 JOB_MS=50..400
SEED=$((($(date +%s%N) / 1000) % 32768)) TIMEOUT=900 BIN= BACKEND=amqp+postgresql
SERVER_ARGS=() CLUSTER=0
usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 2
}
while [ $# -gt 0 ]; do
  opt=$1 val=
  case $opt in
  --*=*) val=${opt#*=} opt=${opt%%=*} ;;
  --help | -h) usage ;;
  *) [ $# -ge 2 ] || usage; val=$2; shift ;;
  esac
  shift
  case $opt in
  --jobs) JOBS=$val ;;
  --servers) SERVERS=$val ;;
  --kills) KILLS=$val ;;
  --broker-restarts) BROKER_RESTARTS=$val RESTARTS_SET=1 BROKER_SET=1 ;;
  --db-restarts) DB_RESTARTS=$val RESTARTS_SET=1 ;;
  --backend) BACKEND=$val ;;
  --cluster) CLUSTER=$val ;;
  --job-ms) JOB_MS=$val ;;
  --seed) SEED=$val ;;
  --timeout) TIMEOUT=$val ;;
  --mqproc) BIN=$val ;;
  --server-arg) SERVER_ARGS+=("$val") ;;
  *) echo "chaos: unknown option $opt" >&2; usage ;;
  esac
done
[ "$CLUSTER" = 0 ] || [ "$CLUSTER" = 3 ] || { echo "chaos: --cluster takes 3" >&2; exit 2; }
[ "$CLUSTER" = 0 ] || [ "$BACKEND" = amqp+postgresql ] || { echo "chaos: --cluster is for amqp+postgresql" >&2; exit 2; }
for v in JOBS SERVERS KILLS BROKER_RESTARTS DB_RESTARTS SEED TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "chaos: --${v,,} must be a number" >&2; exit 2; }
done
[[ $JOB_MS =~ ^([0-9]+)\.\.([0-9]+)$ ]] || { echo "chaos: --job-ms must be MIN..MAX" >&2; exit 2; }
MS_LO=${BASH_REMATCH[1]} MS_HI=${BASH_REMATCH[2]}
if [ "$MS_LO" -gt "$MS_HI" ] || [ "$SERVERS" -lt 1 ] || [ "$JOBS" -lt 1 ]; then usage; fi
case $BACKEND in
amqp+postgresql) ;;
pg)
  if [ -n "${BROKER_SET:-}" ] && [ "$BROKER_RESTARTS" -gt 0 ]; then
    echo "chaos: pg has no broker to restart (the database is the queue)" >&2
    exit 2
  fi
  BROKER_RESTARTS=0
  ;;
dir+sqlite | sqlite)
  if [ -n "${RESTARTS_SET:-}" ] && [ $((BROKER_RESTARTS + DB_RESTARTS)) -gt 0 ]; then
    echo "chaos: $BACKEND has no broker or database server to restart" >&2
    exit 2
  fi
  BROKER_RESTARTS=0 DB_RESTARTS=0
  ;;
*) echo "chaos: --backend must be amqp+postgresql, dir+sqlite, pg or sqlite" >&2; exit 2 ;;
esac

BUILD=build/bench
SERVICES=build/chaos-services
CLUSTER_DIR=$PWD/build/chaos-cluster
LOGS=build/chaos-logs # --log-dir of the servers; the bench's own files live here too
PROC=ocrd-chaos
RESULTQ=ocrd-chaos-results
SIDE=$REPO/$LOGS/side-effects.log
RANDOM=$SEED

T0=$(date +%s%3N)
now_ms() { date +%s%3N; }
say() { printf '[chaos %7.1fs] %s\n' "$(awk -v a="$(now_ms)" -v b="$T0" 'BEGIN{print (a-b)/1000}')" "$*"; }
fault() { say "FAULT: $*"; echo "$(($(now_ms) - T0)) $*" >>"$LOGS/faults.log"; }

# ---- build -------------------------------------------------------------------------------
mkdir -p "$BUILD"
if [ -z "$BIN" ]; then
  say "building mqproc ($BUILD, RelWithDebInfo, tests off)"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMQPROC_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j2 --target mqproc_bin >"$BUILD/build.log" 2>&1 || {
    tail -n 30 "$BUILD/build.log" >&2
    echo "chaos: build failed (log: $BUILD/build.log)" >&2
    exit 2
  }
  BIN=$REPO/$BUILD/mqproc
fi
SRC_BIN=$(realpath "$BIN")
# Snapshot the binary: replacement servers started later must run the same code even if
# the build directory is rebuilt meanwhile.
cp "$BIN" "$BUILD/mqproc-under-test"
BIN=$REPO/$BUILD/mqproc-under-test
# shellcheck disable=SC2046
cc -O2 -Wall -Wextra bench/chaos_client.c $(pkg-config --cflags --libs librabbitmq jansson) \
  -o "$BUILD/chaos_client"
CLIENT=$REPO/$BUILD/chaos_client
say "mqproc: $BIN ($("$BIN" --version 2>&1 | head -n 1)), a copy of $SRC_BIN"

# ---- services ----------------------------------------------------------------------------
declare -A SPID=() FATE=() # worker id -> pid, how it ended
LIVE=()                    # worker ids of the running servers
PENDING=()                 # due times (ms) of replacement servers to start
OUTAGE_PID='' OUTAGE_WHAT=''
next_worker=1
# shellcheck disable=SC2317 # (called by the trap)
cleanup() {
  local rc=$? id
  trap - EXIT INT TERM
  [ -z "$OUTAGE_PID" ] || wait "$OUTAGE_PID" 2>/dev/null || true
  for id in "${LIVE[@]}"; do kill -TERM "${SPID[$id]}" 2>/dev/null || true; done
  for id in "${LIVE[@]}"; do
    timeout 35 tail --pid="${SPID[$id]}" -f /dev/null 2>/dev/null || kill -KILL "${SPID[$id]}" 2>/dev/null || true
  done
  [ "$BACKEND" != amqp+postgresql ] && [ "$BACKEND" != pg ] ||
    bash scripts/services.sh stop "$SERVICES" >/dev/null 2>&1 || true
  [ "$CLUSTER" = 0 ] || bash scripts/cluster.sh stop "$CLUSTER_DIR" >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rm -rf "$LOGS"
mkdir -p "$LOGS/servers" "$LOGS/runs"
# The table queues (--backend pg, sqlite): the jobs are rows put in with SQL, as a producer
# in another language would (docs/table-queue.md), the results rows taken out the same way.
# table_publish QUEUE RESULT_QUEUE JOBS_FILE; table_drain RESULT_QUEUE OUT_FILE (lines as
# chaos_client drain writes them: job_id state redelivered message_id attempt).
table_publish() {
  local body="json_build_object('job_id', id, 'processor_name', '$1', 'created_time',
    extract(epoch FROM now())::bigint, 'input_file_grps', json_build_array('OCR-D-IMG'),
    'output_file_grps', json_build_array('OCR-D-CHAOS'), 'path_to_mets', '/data/chaos/mets.xml',
    'parameters', json_build_object(), 'result_queue_name', '$2')::text"
  if [ "$BACKEND" = pg ]; then
    { echo "BEGIN; CREATE TEMP TABLE j (id text) ON COMMIT DROP; COPY j FROM STDIN;"
      cat "$3"
      echo '\.'
      echo "INSERT INTO mqproc_messages (queue, body) SELECT '$1', convert_to($body, 'UTF8')
              FROM j; SELECT pg_notify(mqproc_queue_channel('$1'), '$1'); COMMIT;"
    } | psql "$DB" -Xq -v ON_ERROR_STOP=1 >/dev/null
  else
    awk -v q="$1" -v r="$2" -v t="$(date +%s)" 'BEGIN { print "BEGIN IMMEDIATE;" }
      { printf "INSERT INTO mqproc_messages (queue, body) VALUES ('"'"'%s'"'"', CAST('"'"'{\"job_id\":\"%s\",\"processor_name\":\"%s\",\"created_time\":%s,\"input_file_grps\":[\"OCR-D-IMG\"],\"output_file_grps\":[\"OCR-D-CHAOS\"],\"path_to_mets\":\"/data/chaos/mets.xml\",\"parameters\":{},\"result_queue_name\":\"%s\"}'"'"' AS BLOB));\n", q, $1, q, t, r }
      END { print "COMMIT;" }' "$3" | sqlite3 -cmd '.timeout 30000' "$DBFILE" &&
      echo "queue $1" >>"$DBFILE-control" # the servers look now (else within a second)
  fi
}
table_drain() {
  if [ "$BACKEND" = pg ]; then
    sql "WITH r AS (DELETE FROM mqproc_messages WHERE queue = '$1'
           RETURNING convert_from(body, 'UTF8')::json AS b, message_id, headers)
         SELECT coalesce(b->>'job_id', '(undecodable)') || ' ' || coalesce(b->>'state', '?')
           || ' 0 ' || coalesce(nullif(message_id, ''), '-') || ' '
           || coalesce(headers->>'x-mqproc-attempt', '-') FROM r" >"$2"
  else
    sql "SELECT coalesce(json_extract(CAST(body AS TEXT), '\$.job_id'), '(undecodable)') || ' '
           || coalesce(json_extract(CAST(body AS TEXT), '\$.state'), '?') || ' 0 '
           || coalesce(nullif(message_id, ''), '-') || ' '
           || coalesce(json_extract(headers, '\$.\"x-mqproc-attempt\"'), '-')
         FROM mqproc_messages WHERE queue = '$1';
         DELETE FROM mqproc_messages WHERE queue = '$1'" >"$2"
  fi
  echo "drained $(wc -l <"$2") result(s)"
}
table_counts() { # ready and held messages of the job queue
  sql "SELECT (SELECT count(*) FROM mqproc_messages WHERE queue = '$PROC' AND consumer IS NULL)
         || ' ' || (SELECT count(*) FROM mqproc_messages WHERE queue = '$PROC'
         AND consumer IS NOT NULL)"
}
if [ "$BACKEND" = amqp+postgresql ] || [ "$BACKEND" = pg ]; then
  say "starting private RabbitMQ + PostgreSQL in $SERVICES"
  bash scripts/services.sh start "$SERVICES" >"$BUILD/services-start.log" 2>&1 || {
    cat "$BUILD/services-start.log" >&2
    exit 2
  }
  set -a
  # shellcheck disable=SC1091
  . "$SERVICES/env"
  set +a
  QUEUE=$MQPROC_TEST_AMQP_URL DB=$MQPROC_TEST_PG_URL
  [ "$BACKEND" != pg ] || QUEUE=$DB # the database is the queue too (one transaction per step)
  if [ "$CLUSTER" = 3 ]; then
    say "starting a 3-node RabbitMQ cluster in $CLUSTER_DIR"
    bash scripts/cluster.sh start "$CLUSTER_DIR" >"$BUILD/cluster-start.log" 2>&1 || {
      cat "$BUILD/cluster-start.log" >&2
      exit 2
    }
    QUEUE=$(sed -n "s/^MQPROC_CLUSTER_URLS='\(.*\)'$/\1/p" "$CLUSTER_DIR/env")
    SERVER_ARGS+=(--queue-type=quorum)
    export CHAOS_QUORUM=1
  fi
  export PGCONNECT_TIMEOUT=2
  sql() { psql "$DB" -XAtqc "$1" 2>/dev/null; }
  # "job_id state attempt tries deliveries requeues result_published(t/f)", tab-separated
  jobs_tsv() {
    sql "COPY (SELECT job_id, state, attempt, tries, deliveries, requeues, result_published
              FROM mqproc_jobs) TO STDOUT"
  }
  # ready and unacknowledged messages of the job queue
  queue_counts() {
    if [ "$CLUSTER" = 3 ]; then
      local n
      for n in 1 2 3; do
        bash scripts/cluster.sh ctl "$CLUSTER_DIR" "$n" list_queues -q --no-table-headers name \
          messages_ready messages_unacknowledged 2>/dev/null | awk -v q="$PROC" '$1 == q { print $2, $3 }' &&
          return 0
      done
      return 0
    fi
    [ "$BACKEND" != pg ] || { table_counts; return 0; }
    bash scripts/services.sh rabbitmqctl "$SERVICES" list_queues -q --no-table-headers name \
      messages_ready messages_unacknowledged 2>/dev/null | awk -v q="$PROC" '$1 == q { print $2, $3 }'
  }
elif [ "$BACKEND" = sqlite ]; then
  say "sqlite:// queue and store in $LOGS/jobs.db (no servers to start)"
  DBFILE=$REPO/$LOGS/jobs.db
  QUEUE=sqlite://$DBFILE DB=sqlite://$DBFILE
  sql() { sqlite3 -cmd '.timeout 30000' "$DBFILE" "$1" 2>/dev/null; }
  jobs_tsv() {
    sqlite3 -cmd '.timeout 30000' -separator $'\t' "$DBFILE" \
      "SELECT job_id, state, attempt, tries, deliveries, requeues,
              CASE WHEN result_published THEN 't' ELSE 'f' END FROM mqproc_jobs"
  }
  queue_counts() { table_counts; }
else
  say "dir:// queue and sqlite:// store in $LOGS (no servers to start)"
  SPOOL=$REPO/$LOGS/spool DBFILE=$REPO/$LOGS/jobs.db
  QUEUE=dir://$SPOOL DB=sqlite://$DBFILE
  sql() { sqlite3 -cmd '.timeout 30000' "$DBFILE" "$1" 2>/dev/null; }
  jobs_tsv() {
    sqlite3 -cmd '.timeout 30000' -separator $'\t' "$DBFILE" \
      "SELECT job_id, state, attempt, tries, deliveries, requeues,
              CASE WHEN result_published THEN 't' ELSE 'f' END FROM mqproc_jobs"
  }
  # files ready in new/ and held in cur/
  queue_counts() {
    echo "$(find "$SPOOL/$PROC/new" -type f | wc -l) $(find "$SPOOL/$PROC/cur" -type f | wc -l)"
  }
fi
: >"$SIDE"
: >"$LOGS/faults.log"
"$BIN" migrate --database="$DB" >"$LOGS/migrate.log" 2>&1 || { cat "$LOGS/migrate.log" >&2; exit 2; }

# ---- servers -----------------------------------------------------------------------------
start_server() {
  local id=chaos-w$next_worker
  next_worker=$((next_worker + 1))
  CHAOS_WORKER=$id CHAOS_SIDE_LOG=$SIDE CHAOS_RUN_DIR=$REPO/$LOGS/runs "$BIN" processing-server --processor "$PROC" \
    --exec "$REPO/bench/chaos-proc.sh" --queue="$QUEUE" --database="$DB" --lease=5 \
    --heartbeat=5 --log-dir="$REPO/$LOGS" --worker-id="$id" --pass-env='CHAOS_*' "${SERVER_ARGS[@]}" \
    >"$LOGS/servers/$id.log" 2>&1 </dev/null &
  SPID[$id]=$!
  LIVE+=("$id")
  say "server $id started (pid ${SPID[$id]})"
}
drop_live() { # drop_live ID
  local id keep=()
  for id in "${LIVE[@]}"; do [ "$id" = "$1" ] || keep+=("$id"); done
  LIVE=("${keep[@]}")
}

# a killed server's messages come back after its visibility deadline, as its jobs' leases end
[ "$BACKEND" != pg ] && [ "$BACKEND" != sqlite ] || SERVER_ARGS=(--queue-visibility=5 "${SERVER_ARGS[@]}")
for _ in $(seq 1 "$SERVERS"); do start_server; done
for id in "${LIVE[@]}"; do
  for _ in $(seq 1 600); do
    grep -q 'consuming from queue' "$LOGS/servers/$id.log" && break
    kill -0 "${SPID[$id]}" 2>/dev/null || { cat "$LOGS/servers/$id.log" >&2; exit 2; }
    sleep 0.1
  done
done
say "$SERVERS servers consuming"

# ---- jobs and the fault plan -------------------------------------------------------------
# Job ids end in the job's run time in ms (the processor sleeps that long).
awk -v n="$JOBS" -v seed="$SEED" -v lo="$MS_LO" -v hi="$MS_HI" 'BEGIN { srand(seed)
  for (i = 1; i <= n; i++) printf "job-%05d-%d\n", i, lo + int(rand() * (hi - lo + 1)) }' \
  >"$LOGS/jobs.txt"
# Each fault fires once the number of final jobs reaches its threshold (5..85 % of N),
# so every fault hits a running system, whatever the speed of the machine.
awk -v n="$JOBS" -v seed="$SEED" -v k="$KILLS" -v b="$BROKER_RESTARTS" -v d="$DB_RESTARTS" '
  function add(t) { printf "%d %s\n", int(n * (0.05 + 0.80 * rand())), t }
  BEGIN { srand(seed + 1); for (i = 0; i < k; i++) add("kill")
          for (i = 0; i < b; i++) add("broker"); for (i = 0; i < d; i++) add("db") }' |
  sort -n >"$LOGS/fault-plan.txt"
mapfile -t PLAN <"$LOGS/fault-plan.txt"
say "fault plan (final jobs -> fault): $(tr '\n' ' ' <"$LOGS/fault-plan.txt")"

kills=0 broker_restarts=0 db_restarts=0 unexpected_exits=0 orphans=0
# One grep over every process's environment: a grep per process took half a minute with
# the hundreds of processes of --concurrency=64 servers, and held up the fault plan.
survivors() { # survivors WORKER: "pid:command" of live processes started by that server
  local e p comm
  while IFS= read -r e; do
    p=${e#/proc/}
    p=${p%/environ}
    comm=$(<"/proc/$p/comm") 2>/dev/null || continue
    echo -n "$p:$comm "
  done < <(grep -lxzs "CHAOS_WORKER=$1" /proc/[0-9]*/environ)
}
inject() {
  local what=$1 victim pid down
  case $what in
  kill)
    victim=${LIVE[RANDOM % ${#LIVE[@]}]}
    pid=${SPID[$victim]}
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    drop_live "$victim"
    FATE[$victim]="killed (-9)"
    kills=$((kills + 1))
    down=$((500 + RANDOM % 2500))
    PENDING+=($(($(now_ms) + down)))
    fault "kill -9 $victim (pid $pid); replacement in $down ms"
    # The processor should die with its server (PR_SET_PDEATHSIG): what is still alive?
    sleep 0.05
    local left
    left=$(survivors "$victim")
    if [ -n "$left" ]; then
      orphans=$((orphans + $(wc -w <<<"$left")))
      say "  still alive 0.05 s after the kill, from $victim: $left"
    fi
    ;;
  broker | db)
    down=$((2 + RANDOM % 5))
    if [ "$what" = broker ] && [ "$CLUSTER" = 3 ]; then
      local node=$((1 + RANDOM % 3))
      broker_restarts=$((broker_restarts + 1))
      fault "RabbitMQ node $node kill -9, down ${down} s, start"
      (bash scripts/cluster.sh kill "$CLUSTER_DIR" "$node" && sleep "$down" &&
        bash scripts/cluster.sh start-node "$CLUSTER_DIR" "$node") >>"$LOGS/outages.log" 2>&1 &
    elif [ "$what" = broker ]; then
      broker_restarts=$((broker_restarts + 1))
      fault "RabbitMQ stop, down ${down} s, start"
      (bash scripts/services.sh rabbitmq-stop "$SERVICES" && sleep "$down" &&
        bash scripts/services.sh rabbitmq-start "$SERVICES") >>"$LOGS/outages.log" 2>&1 &
    else
      db_restarts=$((db_restarts + 1))
      fault "PostgreSQL stop, down ${down} s, start"
      (bash scripts/services.sh pg-stop "$SERVICES" && sleep "$down" &&
        bash scripts/services.sh pg-start "$SERVICES") >>"$LOGS/outages.log" 2>&1 &
    fi
    OUTAGE_PID=$! OUTAGE_WHAT=$what
    ;;
  esac
}

# ---- run ---------------------------------------------------------------------------------
say "publishing $JOBS jobs (job-ms $MS_LO..$MS_HI, seed $SEED)"
T_PUB=$(now_ms)
if [ "$BACKEND" = pg ] || [ "$BACKEND" = sqlite ]; then
  table_publish "$PROC" "$RESULTQ" "$LOGS/jobs.txt" || { echo "chaos: publish failed" >&2; exit 2; }
else
  "$CLIENT" publish "$QUEUE" "$PROC" "$RESULTQ" "$LOGS/jobs.txt" || { echo "chaos: publish failed" >&2; exit 2; }
fi
final=0 last_report=0 plan_i=0 timed_out=0
while :; do
  if n=$(sql "SELECT count(*) FROM mqproc_jobs WHERE state IN ('SUCCESS','FAILED')") && [ -n "$n" ]; then
    final=$n
  fi
  [ "$final" -ge "$JOBS" ] && break
  now=$(now_ms)
  if [ $((now - T_PUB)) -gt $((TIMEOUT * 1000)) ]; then
    timed_out=1
    say "TIMEOUT after $TIMEOUT s: $final of $JOBS jobs final"
    break
  fi
  if [ $((now - last_report)) -ge 10000 ]; then
    say "progress: $final / $JOBS final"
    last_report=$now
  fi
  # servers that died by themselves: note it and replace them
  for id in "${LIVE[@]}"; do
    if ! kill -0 "${SPID[$id]}" 2>/dev/null; then
      st=0
      wait "${SPID[$id]}" 2>/dev/null || st=$?
      FATE[$id]="EXITED by itself (status $st)"
      drop_live "$id"
      unexpected_exits=$((unexpected_exits + 1))
      say "server $id exited by itself (status $st); last lines:"
      tail -n 5 "$LOGS/servers/$id.log" | sed 's/^/    /'
      PENDING+=($((now + 1000))) # not at once: no hot crash loop
    fi
  done
  # replacements that are due
  keep=()
  for due in "${PENDING[@]}"; do
    if [ "$due" -le "$now" ]; then start_server; else keep+=("$due"); fi
  done
  PENDING=("${keep[@]}")
  # the outage in progress
  if [ -n "$OUTAGE_PID" ] && ! kill -0 "$OUTAGE_PID" 2>/dev/null; then
    st=0
    wait "$OUTAGE_PID" || st=$?
    [ "$st" = 0 ] || { say "outage script failed (status $st); see $LOGS/outages.log"; exit 2; }
    fault "$OUTAGE_WHAT back"
    OUTAGE_PID=
  fi
  # the next fault, one at a time
  if [ -z "$OUTAGE_PID" ] && [ ${#PENDING[@]} = 0 ] && [ "$plan_i" -lt ${#PLAN[@]} ] &&
    [ "$final" -ge "${PLAN[plan_i]%% *}" ] && [ ${#LIVE[@]} -gt 0 ]; then
    inject "${PLAN[plan_i]#* }"
    plan_i=$((plan_i + 1))
  fi
  sleep 0.5
done
T_END=$(now_ms)
[ -z "$OUTAGE_PID" ] || { wait "$OUTAGE_PID" || true; fault "$OUTAGE_WHAT back"; OUTAGE_PID=; }
for due in "${PENDING[@]}"; do start_server; done
PENDING=()
say "$final / $JOBS jobs final in $(((T_END - T_PUB) / 1000)) s"

# Every delivery should be settled once every job is final (copies held under another
# server's lease are requeued and then acked as already final): wait for the job queue.
qc="? ?"
deadline=$((SECONDS + 30))
while :; do
  qc=$(queue_counts || true)
  [ "$qc" = "0 0" ] || [ "$timed_out" = 1 ] || [ $SECONDS -ge $deadline ] && break
  sleep 1
done
say "job queue $PROC: ready/unacked = ${qc:-?}"

# A final job whose early-acked holder was killed before it sent the result waits in the
# outbox (mqproc_outbox) until its lease runs out and another server's outbox sweep sends
# it: wait for that (two leases at most) before the results are counted.
ob="?"
deadline=$((SECONDS + 75))
while :; do
  ob=$(sql "SELECT count(*) FROM mqproc_outbox" || echo "?")
  [ "$ob" = 0 ] || [ "$timed_out" = 1 ] || [ $SECONDS -ge $deadline ] && break
  sleep 1
done
say "outbox: ${ob:-?} outcome(s) still to send"

say "stopping the servers (SIGTERM)"
for id in "${LIVE[@]}"; do kill -TERM "${SPID[$id]}" 2>/dev/null || true; done
for id in "${LIVE[@]}"; do
  st=0
  if timeout 40 tail --pid="${SPID[$id]}" -f /dev/null; then
    wait "${SPID[$id]}" || st=$?
    FATE[$id]="stopped at the end (status $st)"
  else
    kill -KILL "${SPID[$id]}" 2>/dev/null || true
    wait "${SPID[$id]}" 2>/dev/null || true
    FATE[$id]="did NOT stop within 40 s of SIGTERM (killed)"
  fi
done
LIVE=()

if [ "$BACKEND" = pg ] || [ "$BACKEND" = sqlite ]; then
  table_drain "$RESULTQ" "$LOGS/results.txt" | sed 's/^/    /'
else
  "$CLIENT" drain "$QUEUE" "$RESULTQ" "$LOGS/results.txt" 3000 | sed 's/^/    /'
fi
jobs_tsv >"$LOGS/jobs-db.tsv"
dead=$(sql "SELECT count(*) FROM mqproc_dead_letters")
unended=$(sql "SELECT count(*) FROM mqproc_job_tries WHERE ended_at IS NULL")
sleep 1 # orphaned processor runs of killed servers may still be finishing

# ---- figures -----------------------------------------------------------------------------
wall_ms=$((T_END - T_PUB))
eval "$(awk -F'[ \t]' -v out=vars '
  FILENAME ~ /jobs.txt$/   { job[$1] = 1; n++; next }
  FILENAME ~ /jobs-db.tsv$/ { if (!($1 in job)) { stray++; next }
                              st[$1] = $2; rows[$2]++; att += $3; tries += $4
                              if ($2 == "SUCCESS" && $7 != "t") unpub++; next }
  FILENAME ~ /side-effects.log$/ { if ($5 == "start") { starts++; runs[$1]++ }
                                   else if ($5 == "done") { dones++; done_[$1]++ }
                                   else if ($5 == "overlap") ovl[$1] = 1; next }
  FILENAME ~ /results.txt$/ { res++; r[$1]++
                              # a re-send of a result (outbox sweep, broker reconnect) carries
                              # the message_id and the x-mqproc-attempt of the first send; a
                              # second outcome of the job would come from another attempt
                              k = $1 SUBSEP $4 SUBSEP $5
                              if ($4 == "-" || $5 == "-") k = k SUBSEP NR
                              if (k in seen) resent++
                              else { seen[k] = 1; if ($2 == "SUCCESS") rs[$1]++ }
                              if (($1 in st) && st[$1] != $2) mism++; next }
  END {
    for (j in job) {
      s = st[j]
      if (s == "SUCCESS" || s == "FAILED") fin++; else lost++
      if (runs[j] > 1) multi++
      if (done_[j] > 1) twice++
      if (ovl[j]) overlap++
      if (s == "SUCCESS" && done_[j] < 1) bogus++
      if (r[j] > 1) dup++
      if (rs[j] > 1) dups++
      if ((s == "SUCCESS" || s == "FAILED") && r[j] < 1) miss++
    }
    printf "N=%d FIN=%d LOST=%d SUCC=%d FAILD=%d STRAY=%d ATT=%d TRIES=%d UNPUB=%d ", n, fin, lost,
      rows["SUCCESS"], rows["FAILED"], stray, att, tries, unpub
    printf "STARTS=%d DONES=%d MULTI=%d TWICE=%d BOGUS=%d OVERLAP=%d ", starts, dones, multi, twice,
      bogus, overlap
    printf "RES=%d RESENT=%d DUP=%d DUPS=%d MISS=%d MISM=%d\n", res, resent, dup, dups, miss, mism
  }' "$LOGS/jobs.txt" "$LOGS/jobs-db.tsv" "$SIDE" "$LOGS/results.txt")"

rate=$(awk -v n="$FIN" -v ms="$wall_ms" 'BEGIN { printf "%.1f", (ms > 0 ? n * 1000 / ms : 0) }')
{
  echo
  echo "================ chaos ($BACKEND): $JOBS jobs, $SERVERS servers, job-ms $MS_LO..$MS_HI, seed $SEED ================"
  printf '%-44s %s\n' \
    "jobs published" "$N" \
    "SUCCESS rows" "$SUCC" \
    "FAILED rows" "$FAILD" \
    "lost (no SUCCESS/FAILED row)" "$LOST" \
    "processor executions (starts)" "$STARTS" \
    "  extra executions (starts - jobs)" "$((STARTS - N))" \
    "  jobs executed more than once" "$MULTI" \
    "processor completions (exit 0)" "$DONES" \
    "  jobs completed more than once" "$TWICE" \
    "  jobs with overlapping runs" "$OVERLAP" \
    "  SUCCESS rows without a completion (bug)" "$BOGUS" \
    "claims (sum of attempt) / tries" "$ATT / $TRIES" \
    "result messages" "$RES" \
    "  re-sent result messages (same message_id)" "$RESENT" \
    "  jobs with more than one result message" "$DUP" \
    "  duplicate SUCCESS results (jobs)" "$DUPS" \
    "  missing result messages" "$MISS" \
    "  result state != row state" "$MISM" \
    "  SUCCESS rows with result_published=f" "$UNPUB" \
    "dead letters" "$dead" \
    "tries never ended (killed servers)" "$unended" \
    "job queue ready/unacked after the run" "${qc:-?}" \
    "faults: kills / broker / db restarts" "$kills / $broker_restarts / $db_restarts (planned $KILLS / $BROKER_RESTARTS / $DB_RESTARTS)" \
    "servers that exited by themselves" "$unexpected_exits" \
    "processes alive 0.05 s after a kill -9" "$orphans" \
    "wall time (publish -> all final)" "$(awk -v ms="$wall_ms" 'BEGIN { printf "%.1f s", ms / 1000 }')" \
    "throughput" "$rate jobs/s"
  [ "$timed_out" = 0 ] || echo "TIMED OUT after $TIMEOUT s"
  if [ "$kills" -lt "$KILLS" ] || [ "$broker_restarts" -lt "$BROKER_RESTARTS" ] ||
    [ "$db_restarts" -lt "$DB_RESTARTS" ]; then
    echo "NOTE: the jobs were all final before every planned fault fired: give more --jobs"
  fi
  echo
  printf '%-10s %8s %6s %6s %8s %7s %8s %6s %6s %6s  %s\n' server SUCCESS fenced leaselost brkdown reconn dbunavail held ackfail ERROR fate
  for f in $(printf '%s\n' "$LOGS"/servers/*.log | sort -V); do
    id=$(basename "$f" .log)
    c() { grep -c -- "$1" "$f" || true; }
    printf '%-10s %8s %6s %9s %7s %7s %8s %6s %6s %6s  %s\n' "$id" "$(c ': SUCCESS in')" \
      "$(c 'fenced off')" "$(c 'lost to a newer attempt')" "$(c 'broker connection lost')" \
      "$(c 'reconnecting to the broker')" "$(c 'job store unavailable')" \
      "$(c 'holding this copy')" "$(c 'cannot ack\|cannot requeue')" "$(c ' ERROR ')" "${FATE[$id]:-?}"
  done
  # the jobs worth a look: lost ones, and ones run more than once or with several results
  awk -F'[ \t]' '
    FILENAME ~ /jobs.txt$/ { job[$1] = 1; next }
    FILENAME ~ /jobs-db.tsv$/ { st[$1] = $2 " attempt " $3; next }
    FILENAME ~ /side-effects.log$/ { runs[$1] = runs[$1] " " $4 ":a" $2 "t" $3 ":" $5; n[$1] += ($5 == "start"); next }
    FILENAME ~ /results.txt$/ { res[$1] = res[$1] " " $2 (($3 == 1) ? "(redelivered)" : ""); r[$1]++; next }
    END { for (j in job) {
            fin = st[j] ~ /^(SUCCESS|FAILED)/
            if (!fin || n[j] > 1 || r[j] != 1)
              printf "  %s  row: %s;  runs:%s;  results:%s\n", j, (j in st) ? st[j] : "none",
                (j in runs) ? runs[j] : " none", (j in res) ? res[j] : " none" } }' \
    "$LOGS/jobs.txt" "$LOGS/jobs-db.tsv" "$SIDE" "$LOGS/results.txt" | sort >"$LOGS/odd-jobs.txt"
  if [ -s "$LOGS/odd-jobs.txt" ]; then
    echo
    echo "jobs lost, run more than once, or without exactly one result ($(wc -l <"$LOGS/odd-jobs.txt"); first 15; all in $LOGS/odd-jobs.txt):"
    head -n 15 "$LOGS/odd-jobs.txt"
  fi
  echo
  echo "files: $LOGS/ (servers/*.log, side-effects.log, results.txt, jobs-db.tsv, faults.log)"
} | tee "$LOGS/summary.txt"

rc=0
[ "$LOST" = 0 ] || { echo "FAIL: $LOST jobs lost"; rc=1; }
[ "$DUPS" = 0 ] || { echo "FAIL: $DUPS jobs with more than one SUCCESS result (distinct message_ids)"; rc=1; }
[ "$BOGUS" = 0 ] || { echo "FAIL: $BOGUS SUCCESS rows without a completed processor run"; rc=1; }
[ "$timed_out" = 0 ] || rc=1
[ $rc = 0 ] && echo "PASS: no job lost, no duplicate SUCCESS result"
exit $rc
