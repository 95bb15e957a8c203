#!/usr/bin/env bash
# The main job, end to end: build mqproc, start a processing server for the example C
# processor `ocrd-example`, queue sample jobs (JSON, OCR-D's YAML, a failing one, a
# duplicate, an invalid one), show what happened (the result messages, the server's log),
# then tour the operator's tools on those jobs (mqproc jobs list|show|log, stats, workers,
# the status page) and end with what to paste into a shell to go on by hand.
#
# By default with no server to run: a directory queue (dir://) and an SQLite job store
# (sqlite://) under build/demo-embedded/; jobs are queued the way any program can, by
# writing a file into the queue's tmp/ and moving it into new/. With --rabbitmq: a private
# RabbitMQ + PostgreSQL on loopback (build/demo-services/; the packages are installed
# first when missing, through scripts/setup.sh --rabbitmq), jobs published over AMQP.
#
#   bash scripts/demo.sh [--rabbitmq]            # stops the server (and services) at the end
#   MQPROC_DEMO_KEEP=1 bash scripts/demo.sh      # keep them running; Ctrl-C stops them
#
# The demo's own lines start with "==" (bold on a terminal); the server writes its log to a
# file (shown once the jobs are done, its lines prefixed with "|"; `tail -f` it meanwhile).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BACKEND=embedded
for a in "$@"; do
  case $a in
  --rabbitmq) BACKEND=rabbitmq ;;
  *)
    echo "usage: bash scripts/demo.sh [--rabbitmq]" >&2
    exit 2
    ;;
  esac
done

BUILD=$PWD/build/demo
PROC=ocrd-example
RESULTS=$PROC-result
KEEP=${MQPROC_DEMO_KEEP:-0}
T0=$SECONDS

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
  BOLD=$'\033[1m' DIM=$'\033[2m' OFF=$'\033[0m'
else
  BOLD='' DIM='' OFF=''
fi
say() { printf '\n%s== %s%s\n' "$BOLD" "$*" "$OFF"; }
die() {
  printf '%sdemo: %s%s\n' "$BOLD" "$*" "$OFF" >&2
  exit 1
}
# run a tool as the user would type it (PATH holds $BUILD), showing the command first
show() {
  printf '%s$ %s%s\n' "$BOLD" "$*" "$OFF"
  "$@" || printf '(exit status %d)\n' "$?"
  echo
}

# --- build ------------------------------------------------------------------------------
# make's "[ 42%] Building ..." lines become one line that updates on a terminal (in a file
# or pipe: one line per 10 %); anything else (a warning, the compiler's error) as it comes.
progress() {
  local line pct last=-10 open=0
  while IFS= read -r line; do
    if [[ $line =~ ^\[\ *([0-9]+)%\]\ (.*)$ ]]; then
      pct=${BASH_REMATCH[1]}
      if [ -t 1 ]; then
        printf '\r\033[K  [%3d%%] %.70s' "$pct" "${BASH_REMATCH[2]}"
        open=1
      elif [ $((pct / 10)) -ne $((last / 10)) ]; then
        printf '  [%3d%%] %s\n' "$pct" "${BASH_REMATCH[2]}"
      fi
      last=$pct
    elif [[ $line != Consolidate\ compiler\ generated* ]]; then
      [ "$open" = 0 ] || printf '\n'
      open=0
      printf '%s\n' "$line"
    fi
  done
  [ "$open" = 0 ] || printf '\n'
}

build() {
  local log=$BUILD/build.log t=$SECONDS
  say "build: cmake -S . -B $BUILD && cmake --build $BUILD -j$(nproc)  (the whole log: $log)"
  mkdir -p "$BUILD"
  if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMQPROC_TESTS=OFF >"$log" 2>&1; then
    cat "$log" >&2
    die "cmake could not configure the build (above); bash scripts/setup.sh installs what it needs"
  fi
  if ! cmake --build "$BUILD" -j"$(nproc)" 2>&1 | tee -a "$log" | progress; then
    die "the build failed: the compiler's messages are above (the whole log: $log)"
  fi
  echo "built in $((SECONDS - t)) s: $BUILD/mqproc, $BUILD/$PROC, libmqproc"
}

# --- the server -------------------------------------------------------------------------
server_pid=
SERVER_LOG=
# start_server ARGS...: the processing server in the background, its log in $SERVER_LOG;
# returns once it consumes; sets URL to its status page (--http on a free port)
start_server() {
  "$BUILD/$PROC" processing-server --http=127.0.0.1:0 --retry-backoff-ms=100 "$@" \
    >"$SERVER_LOG" 2>&1 &
  server_pid=$!
  local port='' i
  for i in $(seq 1 300); do
    grep -q "consuming from queue" "$SERVER_LOG" && break
    kill -0 "$server_pid" 2>/dev/null || break
    [ "$i" -lt 300 ] || break
    sleep 0.1
  done
  if ! grep -q "consuming from queue" "$SERVER_LOG"; then
    sed 's/^/  | /' "$SERVER_LOG" >&2
    die "the server did not start consuming (its log is above)"
  fi
  port=$(sed -n 's/.*status page on .* (port \([0-9]*\)).*/\1/p' "$SERVER_LOG" | head -n 1)
  URL=http://127.0.0.1:$port/
  echo "it consumes (pid $server_pid); its log: $SERVER_LOG; its status page: $URL"
}

stop_server() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=
}

show_server_log() {
  say "the server's log ($SERVER_LOG)"
  sed "s/^/  ${DIM}| /; s/\$/${OFF}/" "$SERVER_LOG"
}

# --- sample jobs ------------------------------------------------------------------------
# job_json N / job_yaml N: the same OCR-D processing message, JSON and as PyYAML writes it
job_json() {
  printf '{"job_id": "demo-json-%s", "processor_name": "%s", "created_time": %s,
  "input_file_grps": ["OCR-D-IMG"], "output_file_grps": ["OCR-D-OUT"],
  "path_to_mets": "/data/ws%s/mets.xml", "parameters": {"sleep_ms": 200},
  "result_queue_name": "%s"}' "$1" "$PROC" "$(date +%s)" "$1" "$RESULTS"
}
job_yaml() {
  printf 'created_time: %s\ninput_file_grps:\n- OCR-D-IMG\njob_id: demo-yaml-%s\noutput_file_grps:\n- OCR-D-OUT\npage_id: PHYS_0001..PHYS_0003\nparameters:\n  sleep_ms: 100\npath_to_mets: /data/ws%s/mets.xml\nprocessor_name: %s\nresult_queue_name: %s\n' \
    "$(date +%s)" "$1" "$1" "$PROC" "$RESULTS"
}
JOB_DUPLICATE="{\"job_id\": \"demo-json-1\", \"processor_name\": \"$PROC\", \"created_time\": 0,
  \"input_file_grps\": [\"OCR-D-IMG\"], \"path_to_mets\": \"/data/ws1/mets.xml\",
  \"result_queue_name\": \"$RESULTS\"}"
JOB_FAILS="{\"job_id\": \"demo-always-fails\", \"processor_name\": \"$PROC\", \"created_time\": 0,
  \"input_file_grps\": [\"OCR-D-IMG\"], \"path_to_mets\": \"/data/ws9/mets.xml\",
  \"parameters\": {\"fail\": true}, \"result_queue_name\": \"$RESULTS\"}"
JOB_INVALID="this is not a processing message: {"

# --- the tour ---------------------------------------------------------------------------
tour() {
  say "one more job, with the product's own tool: mqproc submit (--wait: until its outcome)"
  show mqproc submit --processor "$PROC" --mets /data/ws6/mets.xml -I OCR-D-IMG -O OCR-D-OUT \
    --param sleep_ms=100 --job-id demo-submit --result-queue "$RESULTS" --wait --timeout 60

  say "the tools: every job, its tries and its log (MQPROC_QUEUE and MQPROC_DATABASE are set)"
  show mqproc jobs list
  show mqproc jobs show demo-always-fails
  show mqproc jobs log demo-yaml-1
  show mqproc dead-letters list
  show mqproc stats
  show mqproc workers
}

# paste_block QUEUE DATABASE: what to paste into a shell to go on by hand
paste_block() {
  say "your turn: paste this into a shell"
  echo "  export PATH=\"$BUILD:\$PATH\""
  echo "  export MQPROC_QUEUE='$1'"
  echo "  export MQPROC_DATABASE='$2'"
  if [ "$KEEP" = 1 ]; then
    echo "  # the server keeps running; its status page: $URL"
    echo "  mqproc submit --processor $PROC --mets /data/ws1/mets.xml -I OCR-D-IMG --wait"
    echo "  mqproc jobs list; mqproc stats"
  elif [ "$BACKEND" = embedded ]; then
    echo "  mqproc jobs list --state FAILED; mqproc stats"
    echo "  mqproc dashboard --http 127.0.0.1:9464 &     # the status page: http://127.0.0.1:9464/"
    echo "  $PROC processing-server --log-dir '$LOGS' &     # a server for the jobs you submit"
    echo "  mqproc submit --processor $PROC --mets /data/ws1/mets.xml -I OCR-D-IMG --wait"
  fi
  echo "  (more: README.md \"Operate it\", docs/operations.md; your own processor: README.md \"Install\")"
}

kept=0 # 1 while keep mode waits for Ctrl-C, which is then the normal end
finish() {
  if [ "$KEEP" = 1 ]; then
    say "the server keeps running (tail -f $SERVER_LOG; the page: $URL); Ctrl-C stops it"
    kept=1
    wait "$server_pid" || true
    kept=0
  fi
  say "done in $((SECONDS - T0)) s: stopping the server (SIGTERM)$([ "$BACKEND" = embedded ] || echo ' and the services')"
}

# --- the embedded demo: dir:// + sqlite:// ----------------------------------------------
demo_embedded() {
  local dir=$PWD/build/demo-embedded name i
  local spool=$dir/spool db=$dir/jobs.db
  local q=$spool/$PROC n=0
  LOGS=$dir/logs
  SERVER_LOG=$dir/server.log
  rm -rf "$dir"
  mkdir -p "$LOGS" "$spool/$RESULTS"/{tmp,new,cur,failed}

  say "processing server: $PROC processing-server --queue=dir://$spool --database=sqlite://$db"
  echo "(no broker or database server: a directory queue and an SQLite file)"
  start_server --queue="dir://$spool" --database="sqlite://$db" --migrate --log-dir="$LOGS"

  say "queueing sample jobs: each file written into $q/tmp/, then moved into new/"
  enqueue() { # NAME BODY: what any program can do (mqproc submit --queue dir://... does it too)
    n=$((n + 1))
    name=$(printf '50-%016x-demo-%s-%s' "$(date +%s%6N)" "$n" "$1")
    printf '%s' "$2" >"$q/tmp/$name"
    mv "$q/tmp/$name" "$q/new/$name"
  }
  for i in 1 2 3 4 5; do
    enqueue "json-$i" "$(job_json "$i")"
    enqueue "yaml-$i" "$(job_yaml "$i")"
  done
  enqueue duplicate "$JOB_DUPLICATE"
  enqueue fails "$JOB_FAILS"
  enqueue invalid "$JOB_INVALID"
  echo "queued 5 JSON + 5 YAML jobs, a duplicate of demo-json-1, a failing job, an invalid message"

  say "result messages in $spool/$RESULTS/new (waiting for 11: 10 SUCCESS + 1 FAILED)"
  for i in $(seq 1 1200); do
    [ "$(find "$spool/$RESULTS/new" -type f | wc -l)" -ge 11 ] && break
    [ "$i" -lt 1200 ] || die "no 11 results after 120 s (the server's log: $SERVER_LOG)"
    sleep 0.1
  done
  for name in "$spool/$RESULTS/new"/*; do
    sed '/^MQPROC-ENVELOPE /d; s/^/  /' "$name"
    echo
  done
  for _ in $(seq 1 100); do [ -z "$(ls "$q/cur")" ] && break; sleep 0.1; done

  show_server_log
  say "dead letters in $q/failed/ (the invalid message, the FAILED job), each with its reason"
  for name in "$q/failed"/*.reason; do
    [ -e "$name" ] || continue
    echo "  failed/$(basename "$name" .reason): $(cat "$name")"
  done

  export PATH="$BUILD:$PATH" MQPROC_QUEUE="dir://$spool" MQPROC_DATABASE="sqlite://$db"
  tour
  say "the status page: $URL"
  echo "the same page on any server with --http, or from a process that takes no jobs:"
  echo "mqproc dashboard --http 127.0.0.1:9464 (it reads MQPROC_DATABASE and MQPROC_QUEUE)"
  paste_block "$MQPROC_QUEUE" "$MQPROC_DATABASE"
  finish
}

# --- the RabbitMQ + PostgreSQL demo -----------------------------------------------------
demo_rabbitmq() {
  local services=$PWD/build/demo-services i
  local amqp db
  LOGS=$PWD/build/demo-logs
  SERVER_LOG=$LOGS/server.log

  say "private RabbitMQ and PostgreSQL ($services)"
  services_dir=$services
  bash scripts/services.sh start "$services"
  set -a
  # shellcheck disable=SC1091
  . "$services/env"
  set +a
  amqp=$MQPROC_TEST_AMQP_URL
  db=$MQPROC_TEST_PG_URL

  say "schema: mqproc migrate"
  "$BUILD/mqproc" migrate --database="$db"

  say "processing server: $PROC processing-server --queue=$amqp --database=$db"
  rm -rf "$LOGS"
  mkdir -p "$LOGS"
  start_server --queue="$amqp" --database="$db" --log-dir="$LOGS"
  amqp-declare-queue --url="$amqp" -q "$RESULTS" -d >/dev/null

  say "publishing sample jobs to exchange ocrd-network-default, routing key $PROC"
  publish() { amqp-publish --url="$amqp" -e ocrd-network-default -r "$PROC" -b "$1"; }
  for i in 1 2 3 4 5; do
    publish "$(job_json "$i")"
    publish "$(job_yaml "$i")"
  done
  publish "$JOB_DUPLICATE"
  publish "$JOB_FAILS"
  publish "$JOB_INVALID"
  echo "published 5 JSON + 5 YAML jobs, a duplicate of demo-json-1, a failing job, an invalid message"

  say "result messages on $RESULTS (waiting for 11: 10 SUCCESS + 1 FAILED)"
  timeout 120 amqp-consume --url="$amqp" -q "$RESULTS" -c 11 -- sh -c 'cat; echo' | sed 's/^/  /'

  show_server_log
  say "queues on the broker: $PROC.dead holds the dead letters (the invalid message, the FAILED job)"
  bash scripts/services.sh rabbitmqctl "$services" list_queues -q name messages_ready \
    messages_unacknowledged 2>/dev/null | sed 's/^/  /'

  export PATH="$BUILD:$PATH" MQPROC_QUEUE="$amqp" MQPROC_DATABASE="$db"
  tour
  say "the status page: $URL"
  if [ "$KEEP" = 1 ]; then
    paste_block "$amqp" "$db"
  else
    echo "(it stops with the server; MQPROC_DEMO_KEEP=1 bash scripts/demo.sh --rabbitmq keeps the"
    echo " server and the services running and prints what to paste into a shell)"
  fi
  finish
}

services_dir=
# shellcheck disable=SC2317 # (called by the trap)
cleanup() {
  local rc=$?
  if [ "$kept" = 1 ]; then
    say "stopping the server (SIGTERM)$([ -z "$services_dir" ] || echo ' and the services')"
    rc=0
  fi
  stop_server
  if [ -n "$services_dir" ]; then
    bash scripts/services.sh stop "$services_dir" >/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "$BACKEND" = rabbitmq ]; then
  say "packages for --rabbitmq: bash scripts/setup.sh --rabbitmq (installs what is missing)"
  bash scripts/setup.sh --rabbitmq
fi
build
if [ "$BACKEND" = embedded ]; then
  demo_embedded
else
  demo_rabbitmq
fi
