#!/usr/bin/env bash
# The operator reads on a big job table (issue 9, item 3): with 1 000 000 jobs rows,
# `mqproc jobs list` (plain, by state, by processor), `mqproc stats` and `mqproc workers`
# should each answer in <= 200 ms. Starts its own RabbitMQ and PostgreSQL (the project's
# services script), fills the table with generate_series (10 processors, 1 % FAILED, 0.5 %
# RUNNING, a few QUEUED/CANCELLED, the rest SUCCESS, spread over 30 days; 40 workers rows),
# runs each command 7 times and prints the median and max wall time. Then the HTTP side
# (issue 10) on the same table: a processing server's --http (/healthz: the floor of a
# round trip; /metrics: a scrape, goal <= 10 ms; /readyz) and `mqproc dashboard` (the
# status page /, job lists, a job), each 21 curl requests, median and max. A last line
# `RESULT key=value ...` (ms).
#
#   bash bench/fleet_reads.sh [--rows=N]
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=1000000
for a in "$@"; do
  case $a in
  --rows=*) ROWS=${a#--rows=} ;;
  *) echo "usage: bash bench/fleet_reads.sh [--rows=N]" >&2; exit 2 ;;
  esac
done
BUILD=build/fleet-reads
SERVICES=$BUILD/services
mkdir -p "$BUILD"
say() { printf '[fleet_reads] %s\n' "$*" >&2; }
say "building mqproc (Release) in $BUILD"
{ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMQPROC_TESTS=OFF &&
  cmake --build "$BUILD" -j2 --target mqproc_bin; } >"$BUILD/build.log" 2>&1 ||
  { tail -n 20 "$BUILD/build.log" >&2; exit 2; }
MQPROC=$PWD/$BUILD/mqproc
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  bash scripts/services.sh stop "$SERVICES" >/dev/null 2>&1 || true
}
trap cleanup EXIT
say "starting private RabbitMQ + PostgreSQL in $SERVICES"
bash scripts/services.sh start "$SERVICES" >"$BUILD/services.log" 2>&1 ||
  { cat "$BUILD/services.log" >&2; exit 2; }
AMQP=$(sed -n "s/^MQPROC_TEST_AMQP_URL='\(.*\)'$/\1/p" "$SERVICES/env")
PGBASE=$(sed -n "s/^MQPROC_TEST_PG_URL='\(.*\)\/[^/]*'$/\1/p" "$SERVICES/env")
DB=$PGBASE/reads
psql "$PGBASE/postgres" -XAtqc "drop database if exists reads with (force)" -c "create database reads"
export MQPROC_QUEUE=$AMQP MQPROC_DATABASE=$DB
"$MQPROC" migrate >/dev/null 2>&1
say "inserting $ROWS jobs rows"
T0=$(date +%s%3N)
psql "$DB" -XAtq -v rows="$ROWS" <<'SQL'
INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, tries, worker_id, queued_at,
                         created_time, start_time, end_time, exec_time_ms, last_error, request)
SELECT 'job-' || i, 'proc-' || (i % 10),
       CASE WHEN i % 100 = 7 THEN 'FAILED' WHEN i % 200 = 3 THEN 'RUNNING'
            WHEN i % 500 = 11 THEN 'QUEUED' WHEN i % 1000 = 13 THEN 'CANCELLED'
            ELSE 'SUCCESS' END,
       1, 1, 'host-' || (i % 40) || ':' || (1000 + i % 40),
       now() - (:rows - i) * interval '30 days' / :rows,
       now() - (:rows - i) * interval '30 days' / :rows,
       now() - (:rows - i) * interval '30 days' / :rows,
       CASE WHEN i % 200 = 3 OR i % 500 = 11 THEN NULL
            ELSE now() - (:rows - i) * interval '30 days' / :rows + interval '2 seconds' END,
       CASE WHEN i % 100 = 7 THEN NULL ELSE 500 + i % 3000 END,
       CASE WHEN i % 100 = 7 THEN 'processor exited with status 1' END,
       jsonb_build_object('job_id', 'job-' || i, 'processor_name', 'proc-' || (i % 10))
FROM generate_series(1, :rows) AS i;
INSERT INTO mqproc_workers (worker_id, processor_name, host, pid, version, started_at,
                            last_seen, interval_ms, state, concurrency, in_flight, jobs_done)
SELECT 'host-' || w || ':' || (1000 + w), 'proc-' || (w % 10), 'host-' || w, 1000 + w,
       'bench', now() - interval '1 hour', now(), 2000, 'running', 4, 2, 1000
FROM generate_series(0, 39) AS w;
SQL
# a month-old table has been through autovacuum: its visibility map is set, so counts by
# state are index-only scans. One VACUUM right after the insert leaves the map unset (the
# rows' hint bits are set by that pass), so run it in its own session, frozen
psql "$DB" -XAtqc "VACUUM (FREEZE, ANALYZE) mqproc_jobs" -c "VACUUM ANALYZE mqproc_workers"
say "inserted in $(( ($(date +%s%3N) - T0) / 1000 )) s"

# time_cmd NAME ARGS...: 7 runs (after one warm-up), median and max in ms
declare -A MED=() MAX=()
time_cmd() {
  local name=$1 t v=()
  shift
  "$MQPROC" "$@" >/dev/null 2>&1 || { say "$name: '$*' failed"; "$MQPROC" "$@" >&2 || true; exit 1; }
  for _ in 1 2 3 4 5 6 7; do
    t=$(date +%s%N)
    "$MQPROC" "$@" >/dev/null 2>&1
    v+=($(( ($(date +%s%N) - t) / 1000000 )))
  done
  mapfile -t v < <(printf '%s\n' "${v[@]}" | sort -n)
  MED[$name]=${v[3]} MAX[$name]=${v[6]}
}
time_cmd list jobs list
time_cmd list_failed jobs list --state FAILED
time_cmd list_proc jobs list --processor proc-3
time_cmd list_page2 jobs list --limit 50 --after "$(psql "$DB" -XAtqc "SELECT (extract(epoch FROM queued_at) * 1000000)::bigint || ':' || job_id FROM mqproc_jobs ORDER BY queued_at DESC, job_id DESC OFFSET 49 LIMIT 1")"
time_cmd show jobs show job-4242
time_cmd stats stats --processor proc-3
time_cmd stats_all stats
time_cmd workers workers

# ---- HTTP: a server's --http and the dashboard ------------------------------------------
# start_http NAME LOG ARGS...: runs mqproc ARGS in the background, sets PORT from its log
start_http() {
  local name=$1 log=$2
  shift 2
  "$MQPROC" "$@" >"$log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    PORT=$(sed -n 's/.*status page on .*(port \([0-9]*\)).*/\1/p' "$log" | head -n1)
    [ -n "$PORT" ] && return 0
    sleep 0.1
  done
  say "$name did not start"; cat "$log" >&2; exit 1
}
declare -A HMED=() HMAX=()
# time_get NAME URL: 21 GETs (after one warm-up), median and max in ms (curl's total time)
time_get() {
  local name=$1 url=$2 code
  code=$(curl -s -o /dev/null -w '%{http_code}' "$url")
  [ "$code" = 200 ] || { say "$name: $url answered $code"; curl -s "$url" >&2; exit 1; }
  mapfile -t v < <(for _ in $(seq 21); do curl -s -o /dev/null -w '%{time_total}\n' "$url"; done | sort -g)
  HMED[$name]=$(awk -v s="${v[10]}" 'BEGIN { printf "%.1f", s * 1000 }')
  HMAX[$name]=$(awk -v s="${v[20]}" 'BEGIN { printf "%.1f", s * 1000 }')
}
start_http server "$BUILD/server.log" processing-server --processor proc-0 --exec /bin/true \
  --http 127.0.0.1:0 --log-dir "$BUILD/joblogs"
SPORT=$PORT
start_http dashboard "$BUILD/dashboard.log" dashboard --http 127.0.0.1:0
DPORT=$PORT
time_get healthz "http://127.0.0.1:$SPORT/healthz"
time_get metrics "http://127.0.0.1:$SPORT/metrics"
time_get readyz "http://127.0.0.1:$SPORT/readyz"
time_get page "http://127.0.0.1:$DPORT/"
time_get page_jobs "http://127.0.0.1:$DPORT/jobs"
time_get page_failed "http://127.0.0.1:$DPORT/jobs?state=FAILED&processor=proc-3"
time_get page_job "http://127.0.0.1:$DPORT/jobs/job-4242"
HTTP_KEYS=(healthz metrics readyz page page_jobs page_failed page_job)

printf '\n%-38s %10s %10s\n' "command (on $ROWS rows)" "median ms" "max ms"
for k in list list_failed list_proc list_page2 show stats stats_all workers; do
  printf '%-38s %10s %10s\n' "$k" "${MED[$k]}" "${MAX[$k]}"
done
printf '(each a whole `mqproc` process: start, connect, query, print; the goal is <= 200 ms)\n'
printf '\n%-38s %10s %10s\n' "HTTP GET (curl, Release build)" "median ms" "max ms"
for k in "${HTTP_KEYS[@]}"; do
  printf '%-38s %10s %10s\n' "$k" "${HMED[$k]}" "${HMAX[$k]}"
done
printf '(healthz, metrics, readyz: a processing server; page*: mqproc dashboard on the same\n'
printf ' table; healthz is the floor of a round trip; the goal for a scrape is <= 10 ms)\n'
printf '\nRESULT rows=%s' "$ROWS"
for k in list list_failed list_proc list_page2 show stats stats_all workers; do printf ' %s_ms=%s' "$k" "${MED[$k]}"; done
for k in "${HTTP_KEYS[@]}"; do printf ' http_%s_ms=%s' "$k" "${HMED[$k]}"; done
echo
