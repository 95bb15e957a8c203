#!/usr/bin/env bash
# The main job, end to end: build mqproc, start a processing server for the example C
# processor `ocrd-example`, publish sample jobs (JSON, OCR-D's YAML, a failing one, a
# duplicate, an invalid one) and show what happened: the server's log, the result
# messages, the job rows, the dead letters.
#
# By default with no server to run: a directory queue (dir://) and an SQLite job store
# (sqlite://) under build/demo-embedded/; jobs are queued the way any program can, by
# writing a file into the queue's tmp/ and moving it into new/. With --rabbitmq: a private
# RabbitMQ + PostgreSQL on loopback, jobs published over AMQP.
#
#   bash scripts/demo.sh [--rabbitmq]            # stops everything at the end
#   MQPROC_DEMO_KEEP=1 bash scripts/demo.sh      # keep the server running; Ctrl-C stops it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BACKEND=embedded
for a in "$@"; do
  case $a in
  --rabbitmq) BACKEND=rabbitmq ;;
  *) echo "usage: bash scripts/demo.sh [--rabbitmq]" >&2; exit 2 ;;
  esac
done

BUILD=build/demo
SERVICES=build/demo-services
LOGS=build/demo-logs
PROC=ocrd-example
RESULTS=$PROC-result

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "build ($BUILD)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMQPROC_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j2 | grep -E '^\[100%\]|error' || true


if [ "$BACKEND" = embedded ]; then
  DIR=$PWD/build/demo-embedded
  SPOOL=$DIR/spool
  DB=$DIR/jobs.db
  LOGS=$DIR/logs
  Q=$SPOOL/$PROC
  server_pid=
  cleanup() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
      kill -TERM "$server_pid" 2>/dev/null || true
      wait "$server_pid" 2>/dev/null || true
    fi
  }
  trap cleanup EXIT
  rm -rf "$DIR"
  mkdir -p "$LOGS" "$SPOOL/$RESULTS"/{tmp,new,cur,failed}

  say "processing server: $PROC processing-server --queue=dir://$SPOOL --database=sqlite://$DB"
  echo "  (no broker or database server: a directory queue and an SQLite file; its log follows, prefixed with |)"
  "$BUILD/$PROC" processing-server --queue="dir://$SPOOL" --database="sqlite://$DB" --migrate \
    --log-dir="$LOGS" --retry-backoff-ms=100 2>&1 | sed -u 's/^/  | /' &
  server_pid=$(jobs -p | tail -n 1)
  for _ in $(seq 1 100); do [ -d "$Q/new" ] && break; sleep 0.1; done

  say "queueing sample jobs: each file written into $Q/tmp/, then moved into new/"
  n=0
  enqueue() { # NAME BODY: what any program can do (mqproc submit --queue dir://... does it too)
    n=$((n + 1))
    local name
    name=$(printf '50-%016x-demo-%s-%s' "$(date +%s%6N)" "$n" "$1")
    printf '%s' "$2" >"$Q/tmp/$name"
    mv "$Q/tmp/$name" "$Q/new/$name"
  }
  for i in 1 2 3 4 5; do
    enqueue "json-$i" "{\"job_id\": \"demo-json-$i\", \"processor_name\": \"$PROC\", \"created_time\": $(date +%s),
      \"input_file_grps\": [\"OCR-D-IMG\"], \"output_file_grps\": [\"OCR-D-OUT\"],
      \"path_to_mets\": \"/data/ws$i/mets.xml\", \"parameters\": {\"sleep_ms\": 200},
      \"result_queue_name\": \"$RESULTS\"}"
    enqueue "yaml-$i" "$(printf 'created_time: %s\ninput_file_grps:\n- OCR-D-IMG\njob_id: demo-yaml-%s\noutput_file_grps:\n- OCR-D-OUT\npage_id: PHYS_0001..PHYS_0003\nparameters:\n  sleep_ms: 100\npath_to_mets: /data/ws%s/mets.xml\nprocessor_name: %s\nresult_queue_name: %s\n' "$(date +%s)" "$i" "$i" "$PROC" "$RESULTS")"
  done
  enqueue duplicate "{\"job_id\": \"demo-json-1\", \"processor_name\": \"$PROC\", \"created_time\": 0,
    \"input_file_grps\": [\"OCR-D-IMG\"], \"path_to_mets\": \"/data/ws1/mets.xml\",
    \"result_queue_name\": \"$RESULTS\"}"
  enqueue fails "{\"job_id\": \"demo-always-fails\", \"processor_name\": \"$PROC\", \"created_time\": 0,
    \"input_file_grps\": [\"OCR-D-IMG\"], \"path_to_mets\": \"/data/ws9/mets.xml\",
    \"parameters\": {\"fail\": true}, \"result_queue_name\": \"$RESULTS\"}"
  enqueue invalid "this is not a processing message: {"
  echo "queued 5 JSON + 5 YAML jobs, a duplicate of demo-json-1, a failing job, an invalid message"

  say "result messages in $SPOOL/$RESULTS/new (waiting for 11: 10 SUCCESS + 1 FAILED)"
  for _ in $(seq 1 1200); do
    [ "$(find "$SPOOL/$RESULTS/new" -type f | wc -l)" -ge 11 ] && break
    sleep 0.1
  done
  for f in $(ls "$SPOOL/$RESULTS/new"); do
    sed '/^MQPROC-ENVELOPE /d' "$SPOOL/$RESULTS/new/$f" | sed 's/^/  /'
    echo
  done
  for _ in $(seq 1 100); do [ -z "$(ls "$Q/cur")" ] && break; sleep 0.1; done

  say "job rows (mqproc_jobs in $DB)"
  sqlite3 -header -column "$DB" "SELECT job_id, state, attempt, tries, requeues, deliveries,
    exec_time_ms, result_published, substr(coalesce(last_error, ''), 1, 50) AS last_error
    FROM mqproc_jobs ORDER BY job_id"
  say "dead letters (mqproc_dead_letters; the messages are in $Q/failed/ with NAME.reason)"
  sqlite3 -header -column "$DB" "SELECT id, coalesce(job_id, '-') AS job_id,
    substr(reason, 1, 90) AS reason FROM mqproc_dead_letters ORDER BY id"
  ls -1 "$Q/failed" | sed 's/^/  failed\//'
  echo "  new/: $(ls "$Q/new" | wc -l) file(s), cur/: $(ls "$Q/cur" | wc -l) file(s)"
  say "a job log: $LOGS/$PROC/demo-yaml-1.log"
  sed 's/^/  /' "$LOGS/$PROC/demo-yaml-1.log"
  if [ "${MQPROC_DEMO_KEEP:-0}" = 1 ]; then
    say "the server keeps running; queue more with: $BUILD/mqproc submit --queue dir://$SPOOL --processor $PROC --mets /data/ws/mets.xml -I OCR-D-IMG  (Ctrl-C stops)"
    wait "$server_pid"
  fi
  say "done: stopping the server (SIGTERM)"
  exit 0
fi

say "private RabbitMQ and PostgreSQL ($SERVICES)"
bash scripts/services.sh start "$SERVICES"
set -a
# shellcheck disable=SC1091
. "$SERVICES/env"
set +a
AMQP=$MQPROC_TEST_AMQP_URL
DB=$MQPROC_TEST_PG_URL
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  bash scripts/services.sh stop "$SERVICES" >/dev/null || true
}
trap cleanup EXIT

say "schema: $BUILD/mqproc migrate"
"$BUILD/mqproc" migrate --database="$DB"
psql -q "$DB" -c "TRUNCATE mqproc_jobs, mqproc_job_tries, mqproc_dead_letters" >/dev/null

say "processing server: $PROC processing-server (its log follows, prefixed with |)"
rm -rf "$LOGS"
mkdir -p "$LOGS"
"$BUILD/$PROC" processing-server --queue="$AMQP" --database="$DB" --log-dir="$LOGS" \
  --retry-backoff-ms=100 2>&1 | sed -u 's/^/  | /' &
server_pid=$(jobs -p | tail -n 1)
for _ in $(seq 1 300); do # until the server consumes (the queue lists one consumer)
  bash scripts/services.sh rabbitmqctl "$SERVICES" list_queues -q --no-table-headers name \
    consumers 2>/dev/null | grep -qE "^$PROC[[:space:]]+1$" && break
  sleep 0.2
done
amqp-declare-queue --url="$AMQP" -q "$RESULTS" -d >/dev/null

say "publishing sample jobs to exchange ocrd-network-default, routing key $PROC"
publish() { amqp-publish --url="$AMQP" -e ocrd-network-default -r "$PROC" -b "$1"; }
for i in 1 2 3 4 5; do
  publish "{\"job_id\": \"demo-json-$i\", \"processor_name\": \"$PROC\", \"created_time\": $(date +%s),
            \"input_file_grps\": [\"OCR-D-IMG\"], \"output_file_grps\": [\"OCR-D-OUT\"],
            \"path_to_mets\": \"/data/ws$i/mets.xml\", \"parameters\": {\"sleep_ms\": 200},
            \"result_queue_name\": \"$RESULTS\"}"
  publish "$(printf 'created_time: %s\ninput_file_grps:\n- OCR-D-IMG\njob_id: demo-yaml-%s\noutput_file_grps:\n- OCR-D-OUT\npage_id: PHYS_0001..PHYS_0003\nparameters:\n  sleep_ms: 100\npath_to_mets: /data/ws%s/mets.xml\nprocessor_name: %s\nresult_queue_name: %s\n' "$(date +%s)" "$i" "$i" "$PROC" "$RESULTS")"
done
publish "{\"job_id\": \"demo-json-1\", \"processor_name\": \"$PROC\", \"created_time\": 0,
          \"input_file_grps\": [\"OCR-D-IMG\"], \"path_to_mets\": \"/data/ws1/mets.xml\",
          \"result_queue_name\": \"$RESULTS\"}"
publish "{\"job_id\": \"demo-always-fails\", \"processor_name\": \"$PROC\", \"created_time\": 0,
          \"input_file_grps\": [\"OCR-D-IMG\"], \"path_to_mets\": \"/data/ws9/mets.xml\",
          \"parameters\": {\"fail\": true}, \"result_queue_name\": \"$RESULTS\"}"
publish "this is not a processing message: {"
echo "published 5 JSON + 5 YAML jobs, a duplicate of demo-json-1, a failing job, an invalid message"

say "result messages on $RESULTS (waiting for 11: 10 SUCCESS + 1 FAILED)"
timeout 120 amqp-consume --url="$AMQP" -q "$RESULTS" -c 11 -- sh -c 'cat; echo' | sed 's/^/  /'

say "job rows (mqproc_jobs)"
psql "$DB" -c "SELECT job_id, state, attempt, tries, requeues, deliveries, exec_time_ms,
                      result_published, left(coalesce(last_error, ''), 50) AS last_error
               FROM mqproc_jobs ORDER BY job_id"
say "dead letters (mqproc_dead_letters; the messages are in queue $PROC.dead)"
psql "$DB" -c "SELECT id, coalesce(job_id, '-') AS job_id, left(reason, 90) AS reason
               FROM mqproc_dead_letters ORDER BY id"
bash scripts/services.sh rabbitmqctl "$SERVICES" list_queues -q name messages_ready \
  messages_unacknowledged 2>/dev/null | sed 's/^/  /'
say "a job log: $LOGS/$PROC/demo-yaml-1.log"
sed 's/^/  /' "$LOGS/$PROC/demo-yaml-1.log"

if [ "${MQPROC_DEMO_KEEP:-0}" = 1 ]; then
  say "the server keeps running; publish more with: amqp-publish --url=$AMQP -e ocrd-network-default -r $PROC -b '…'  (Ctrl-C stops)"
  wait "$server_pid"
fi
say "done: stopping the server (SIGTERM) and the services"
