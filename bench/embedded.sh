#!/usr/bin/env bash
# The embedded pair's throughput (issue 11): a directory queue (dir://) and an SQLite job
# store (sqlite://), no servers. Builds a Release mqproc, measures the raw limits on this
# machine's disk with a small C program (bench/tp_embedded.c: a durable enqueue loop of
# write + fdatasync + rename + directory fsync, a claim + settle loop of renames; an SQLite
# claim + complete loop, one and 64 jobs per commit, FULL and NORMAL), then runs the example
# C processor (no-op) on N pre-queued jobs with results published to a sibling queue (the
# full protocol): durable (synchronous=FULL) and relaxed (?synchronous=normal). Prints a
# table and a last line `RESULT key=value ...` (jobs/s).
#
#   bash bench/embedded.sh            # N=5000 (about a minute)
#   N=20000 PREFETCH=64 bash bench/embedded.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5000}
BUILD=build/embedded-bench
WORK=$PWD/$BUILD/work
PROC=ocrd-example
say() { printf '[embedded] %s\n' "$*" >&2; }
mkdir -p "$BUILD"
say "building mqproc (Release) in $BUILD"
{ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMQPROC_TESTS=OFF &&
  cmake --build "$BUILD" -j2 --target mqproc_bin ocrd-example &&
  cc -O2 -Wall -Wextra bench/tp_embedded.c $(pkg-config --cflags --libs sqlite3) \
    -o "$BUILD/tp_embedded"; } >"$BUILD/build.log" 2>&1 || { tail -n 20 "$BUILD/build.log" >&2; exit 2; }
rm -rf "$WORK"
mkdir -p "$WORK"
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; true; }
trap cleanup EXIT

declare -A R=()
kv() { # KEY LINE: the value of KEY=... in LINE
  sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2"
}
say "raw limits"
line=$("$BUILD/tp_embedded" dir "$WORK/rawq" 2000)
R[raw_dir_enqueue]=$(kv dir_enqueue_per_s "$line")
R[raw_dir_claim]=$(kv dir_claim_settle_per_s "$line")
R[raw_sqlite_1]=$(kv sqlite_jobs_per_s "$("$BUILD/tp_embedded" sqlite "$WORK/raw.db" 2000 1)")
R[raw_sqlite_64]=$(kv sqlite_jobs_per_s "$("$BUILD/tp_embedded" sqlite "$WORK/raw.db" 20000 64)")
R[raw_sqlite_normal_1]=$(kv sqlite_jobs_per_s "$(SYNC=NORMAL "$BUILD/tp_embedded" sqlite "$WORK/raw.db" 20000 1)")

# run KEY OPTS CONCURRENCY: N no-op jobs through one server; jobs/s first claim -> last end
run() {
  local key=$1 opt=$2 conc=$3 dir=$WORK/$1 db n=0 ms
  db=$dir/jobs.db
  mkdir -p "$dir/spool/results"/{tmp,new,cur,failed}
  "$BUILD/mqproc" migrate --database "sqlite://$db" >/dev/null
  "$BUILD/tp_embedded" fill "$dir/spool/$PROC" "$N" \
    "{\"job_id\": \"j-%d\", \"created_time\": 0, \"processor_name\": \"$PROC\", \"input_file_grps\": [\"IN\"], \"path_to_mets\": \"/m.xml\", \"result_queue_name\": \"results\"}"
  say "$key: $N jobs, --concurrency $conc, sqlite://…$opt"
  "$BUILD/$PROC" processing-server --queue "dir://$dir/spool" --database "sqlite://$db$opt" \
    --concurrency "$conc" ${PREFETCH:+--prefetch "$PREFETCH"} --log-level warn --log-dir "$dir/logs" 2>"$dir/server.log" &
  server=$!
  for _ in $(seq 1 3000); do
    n=$(sqlite3 "$db" "SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'" 2>/dev/null || echo 0)
    [ "$n" -ge "$N" ] && break
    [ -n "$(ls "$dir/spool/$PROC/failed")" ] && break # dead letters: the bench's messages are wrong
    sleep 0.2
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
  [ "$n" -ge "$N" ] || { say "$key: only $n of $N jobs ended SUCCESS"; tail "$dir/server.log" >&2; exit 1; }
  ms=$(sqlite3 "$db" "SELECT max(end_time) - min(start_time) FROM mqproc_jobs")
  R[$key]=$(awk -v n="$N" -v ms="$ms" 'BEGIN { printf "%.0f", n * 1000 / ms }')
  R[${key}_results]=$(find "$dir/spool/results/new" -type f | wc -l)
}
run durable "" 2
run relaxed "?synchronous=normal" 2

printf '\n%-46s %10s\n' "embedded pair, $(nproc) cores, N=$N" "jobs/s"
printf '%-46s %10s\n' "raw: dir enqueue (fdatasync + rename + dir fsync)" "${R[raw_dir_enqueue]}"
printf '%-46s %10s\n' "raw: dir claim + settle (renames, unlink)" "${R[raw_dir_claim]}"
printf '%-46s %10s\n' "raw: SQLite claim+complete, 1/commit, FULL" "${R[raw_sqlite_1]}"
printf '%-46s %10s\n' "raw: SQLite claim+complete, 64/commit, FULL" "${R[raw_sqlite_64]}"
printf '%-46s %10s\n' "raw: SQLite claim+complete, 1/commit, NORMAL" "${R[raw_sqlite_normal_1]}"
printf '%-46s %10s  (%s results)\n' "mqproc dir+sqlite durable, concurrency 2" "${R[durable]}" "${R[durable_results]}"
printf '%-46s %10s  (%s results)\n' "mqproc dir+sqlite relaxed, concurrency 2" "${R[relaxed]}" "${R[relaxed_results]}"
printf '\nRESULT n=%s' "$N"
for k in raw_dir_enqueue raw_dir_claim raw_sqlite_1 raw_sqlite_64 raw_sqlite_normal_1 durable relaxed; do
  printf ' %s=%s' "$k" "${R[$k]}"
done
echo
