#!/usr/bin/env bash
# The embedded pair's throughput (issue 11): a directory queue (dir://) and an SQLite job
# store (sqlite://), no servers. Builds a Release mqproc, measures the raw limits on this
# machine's disk with a small C program (bench/tp_embedded.c: a durable enqueue loop of
# write + fdatasync + rename + directory fsync, a claim + settle loop of renames; an SQLite
# claim + complete loop, one and 64 jobs per commit, FULL and NORMAL), then runs the example
# C processor (no-op) on N pre-queued jobs with results published to a sibling queue (the
# full protocol): durable (the default: synchronous=FULL, results fsynced) and relaxed
# (?synchronous=normal on both URLs: no fsync of results, SQLite syncs at checkpoints). Then, one
# at a time: enqueue -> claim latency (500 jobs, one every 10 ms, into an idle server's
# queue), a claim's cost at the head of a queue of 1000 and of BIG, an idle server's
# wake-ups, and the take-back after kill -9 of a holder. Prints a table and a last line
# `RESULT key=value ...`.
#
#   bash bench/embedded.sh            # N=5000 (about a minute)
#   N=20000 PREFETCH=64 BIG=0 bash bench/embedded.sh   (BIG: the long queue of the claim
#   measurement, default 1000000; 0 skips it)
#   JOURNALED=1 bash bench/embedded.sh   (as root: the same on a fresh ext4 with a journal,
#   Debian's default, in a loop-mounted image: a machine whose disk has none, like the VM
#   of docs/performance.md, shows there what the design does on a usual one)
#
# The table's first line names the filesystem: on ext4 without a journal every new file's
# inode is searched for past the inodes freed in the last minute or so (ext4's
# recently_deleted), so a file per job costs more the more files went before it.
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
server=
mnt=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  [ -n "$mnt" ] && umount "$mnt" 2>/dev/null && rm -f "$BUILD/ext4.img"
  true
}
trap cleanup EXIT
if [ "${JOURNALED:-0}" = 1 ]; then
  mnt=$PWD/$BUILD/ext4
  mkdir -p "$mnt"
  umount "$mnt" 2>/dev/null || true
  rm -f "$BUILD/ext4.img"
  truncate -s 4G "$BUILD/ext4.img"
  if ! mkfs.ext4 -q -F "$BUILD/ext4.img" || ! mount -o loop "$BUILD/ext4.img" "$mnt"; then
    say "JOURNALED=1: cannot make and mount an ext4 image (root and a loop device needed)"
    mnt=
    exit 2
  fi
  WORK=$mnt/work
fi
rm -rf "$WORK"
mkdir -p "$WORK"
# fs_of DIR: its filesystem type, with "-nojournal" for an ext4 without one
fs_of() {
  local src type
  read -r type src < <(findmnt -no FSTYPE,SOURCE -T "$1")
  if [ "$type" = ext4 ] && ! ls /proc/fs/jbd2 2>/dev/null | grep -q "^$(basename "$src")-"; then
    type=ext4-nojournal
  fi
  echo "$type"
}
stop_server() {
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
}

declare -A R=()
R[fs]=$(fs_of "$WORK")
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
  "$BUILD/$PROC" processing-server --queue "dir://$dir/spool$opt" --database "sqlite://$db$opt" \
    --concurrency "$conc" ${PREFETCH:+--prefetch "$PREFETCH"} --log-level warn --log-dir "$dir/logs" 2>"$dir/server.log" &
  server=$!
  for _ in $(seq 1 3000); do
    n=$(sqlite3 "$db" "SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'" 2>/dev/null || echo 0)
    [ "$n" -ge "$N" ] && break
    [ -n "$(ls "$dir/spool/$PROC/failed")" ] && break # dead letters: the bench's messages are wrong
    sleep 0.2
  done
  stop_server
  [ "$n" -ge "$N" ] || { say "$key: only $n of $N jobs ended SUCCESS"; tail "$dir/server.log" >&2; exit 1; }
  ms=$(sqlite3 "$db" "SELECT max(end_time) - min(start_time) FROM mqproc_jobs")
  R[$key]=$(awk -v n="$N" -v ms="$ms" 'BEGIN { printf "%.0f", n * 1000 / ms }')
  R[${key}_results]=$(find "$dir/spool/results/new" -type f | wc -l)
}
run durable "" 2
run relaxed "?synchronous=normal" 2

# serve DIR LEVEL: one server on DIR/spool and DIR/jobs.db (made), its log DIR/server.log
serve() {
  mkdir -p "$1"
  "$BUILD/$PROC" processing-server --queue "dir://$1/spool" --database "sqlite://$1/jobs.db" \
    --migrate --log-level "$2" --log-dir "$1/logs" 2>"$1/server.log" &
  server=$!
}
# An idle server's wake-ups per second over 10 s: its loop thread's (timers, completions), and
# the context switches of all its threads (the SQLite thread's beat commits wait for the disk).
say "idle: one server on an empty queue, 10 s"
serve "$WORK/idle" warn
sleep 2
switches() { cat /proc/"$server"/task/*/status | awk '/ctxt_switches/ { n += $2 } END { print n }'; }
loop_wakes() { awk '/^voluntary_ctxt_switches/ { print $2 }' /proc/"$server"/task/"$server"/status; }
s0=$(switches)
l0=$(loop_wakes)
sleep 10
R[idle_wakeups_per_s]=$(awk -v a="$s0" -v b="$(switches)" 'BEGIN { printf "%.1f", (b - a) / 10 }')
R[idle_loop_wakeups_per_s]=$(awk -v a="$l0" -v b="$(loop_wakes)" 'BEGIN { printf "%.1f", (b - a) / 10 }')
stop_server

# Enqueue -> claim: an idle server, jobs enqueued durably one every 10 ms by another
# program; the claim is the job row's start_time (written by the claim, milliseconds).
say "latency: 500 jobs, one every 10 ms, into an idle server's queue"
dir=$WORK/latency
serve "$dir" info
for _ in $(seq 1 100); do grep -q 'consuming from queue' "$dir/server.log" && break; sleep 0.05; done
"$BUILD/tp_embedded" put "$dir/spool/$PROC" 500 10 \
  "{\"job_id\": \"lat-%d\", \"created_time\": 0, \"processor_name\": \"$PROC\", \"input_file_grps\": [\"IN\"], \"path_to_mets\": \"/m.xml\"}" \
  >"$dir/enqueued.txt"
for _ in $(seq 1 200); do
  [ "$(sqlite3 "$dir/jobs.db" "SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'")" -ge 500 ] && break
  sleep 0.05
done
sqlite3 -separator ' ' "$dir/jobs.db" "SELECT substr(job_id, 5), start_time FROM mqproc_jobs" >"$dir/claimed.txt"
read -r R[lat_p50_ms] R[lat_p99_ms] R[lat_max_ms] < <(awk '
  FILENAME ~ /enqueued/ { at[$1] = $2; next }
  ($1 in at) { printf "%.3f\n", ($2 * 1000 - at[$1]) / 1000 }' "$dir/enqueued.txt" "$dir/claimed.txt" |
  sort -n | awk '{ d[++n] = $1 } END { printf "%.1f %.1f %.1f\n", d[int(n * 0.5) + 1], d[int(n * 0.99) + 1], d[n] }')
stop_server

# A claim's cost and the queue's length: the first 1000 jobs of a queue of 1000, then of a
# queue of BIG (default 1 000 000; BIG=0 skips it), one server, --concurrency 1: ms per job
# (the first to the 1000th claim), and the time from the server's start to its first claim.
claim_run() { # KEY QUEUED
  local key=$1 q=$2 d=$WORK/$1 t0 first
  mkdir -p "$d/spool"
  "$BUILD/mqproc" migrate --database "sqlite://$d/jobs.db" >/dev/null
  "$BUILD/tp_embedded" fill "$d/spool/$PROC" "$q" \
    "{\"job_id\": \"c-%d\", \"created_time\": 0, \"processor_name\": \"$PROC\", \"input_file_grps\": [\"IN\"], \"path_to_mets\": \"/m.xml\"}"
  t0=$(date +%s%3N)
  "$BUILD/$PROC" processing-server --queue "dir://$d/spool" --database "sqlite://$d/jobs.db" \
    --concurrency 1 --log-level warn --log-dir "$d/logs" 2>"$d/server.log" &
  server=$!
  for _ in $(seq 1 6000); do
    [ "$(sqlite3 "$d/jobs.db" "SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'" 2>/dev/null || echo 0)" -ge 1000 ] && break
    sleep 0.1
  done
  stop_server
  first=$(sqlite3 "$d/jobs.db" "SELECT min(start_time) FROM mqproc_jobs")
  R[${key}_first_ms]=$((first - t0))
  R[${key}_ms_per_job]=$(sqlite3 "$d/jobs.db" "SELECT printf('%.2f', (max(start_time) - min(start_time)) / 999.0)
    FROM (SELECT start_time FROM mqproc_jobs ORDER BY start_time LIMIT 1000)")
  rm -rf "$d/spool"
}
BIG=${BIG:-1000000}
say "claims: the first 1000 jobs of a queue of 1000"
claim_run q1k 1000
if [ "$BIG" -gt 0 ]; then
  say "claims: the first 1000 jobs of a queue of $BIG (filling it takes a while)"
  claim_run qbig "$BIG"
fi

# kill -9 of a job's holder: how long until the other server of the same host runs it again.
say "take-back: two servers, the holder of a 30 s job killed with SIGKILL"
dir=$WORK/takeback
mkdir -p "$dir"
"$BUILD/mqproc" migrate --database "sqlite://$dir/jobs.db" >/dev/null
pids=()
for w in A B; do
  "$BUILD/$PROC" processing-server --queue "dir://$dir/spool" --database "sqlite://$dir/jobs.db" \
    --log-level warn --log-dir "$dir/logs" --worker-id "$w" 2>"$dir/server-$w.log" &
  pids+=($!)
done
sleep 1
"$BUILD/mqproc" submit --queue "dir://$dir/spool" --processor "$PROC" --mets /m.xml -I IN \
  --job-id tb-1 --param sleep_ms=30000 >/dev/null
for _ in $(seq 1 100); do
  holder=$(sqlite3 "$dir/jobs.db" "SELECT worker_id FROM mqproc_jobs WHERE job_id = 'tb-1' AND state = 'RUNNING'" 2>/dev/null || true)
  [ -n "$holder" ] && break
  sleep 0.05
done
[ "$holder" = A ] && victim=${pids[0]} || victim=${pids[1]}
t_kill=$(date +%s%3N)
kill -9 "$victim"
for _ in $(seq 1 200); do
  t_again=$(sqlite3 "$dir/jobs.db" "SELECT start_time FROM mqproc_jobs WHERE job_id = 'tb-1' AND attempt = 2" 2>/dev/null || true)
  [ -n "$t_again" ] && break
  sleep 0.05
done
R[takeback_ms]=$([ -n "$t_again" ] && echo $((t_again - t_kill)) || echo "none")
kill "${pids[@]}" 2>/dev/null || true
wait 2>/dev/null || true

printf '\n%-46s %10s\n' "embedded pair, $(nproc) cores, N=$N" "jobs/s"
printf '%-46s %10s\n' "filesystem of the queue and the database" "${R[fs]}"
printf '%-46s %10s\n' "raw: dir enqueue (fdatasync + rename + dir fsync)" "${R[raw_dir_enqueue]}"
printf '%-46s %10s\n' "raw: dir claim + settle (renames, unlink)" "${R[raw_dir_claim]}"
printf '%-46s %10s\n' "raw: SQLite claim+complete, 1/commit, FULL" "${R[raw_sqlite_1]}"
printf '%-46s %10s\n' "raw: SQLite claim+complete, 64/commit, FULL" "${R[raw_sqlite_64]}"
printf '%-46s %10s\n' "raw: SQLite claim+complete, 1/commit, NORMAL" "${R[raw_sqlite_normal_1]}"
printf '%-46s %10s  (%s results)\n' "mqproc dir+sqlite durable, concurrency 2" "${R[durable]}" "${R[durable_results]}"
printf '%-46s %10s  (%s results)\n' "mqproc dir+sqlite relaxed, concurrency 2" "${R[relaxed]}" "${R[relaxed_results]}"
printf '%-46s %10s\n' "enqueue -> claim p50 / p99 / max (ms)" "${R[lat_p50_ms]} / ${R[lat_p99_ms]} / ${R[lat_max_ms]}"
printf '%-46s %10s\n' "ms per job, first 1000 of a queue of 1000" "${R[q1k_ms_per_job]}"
[ "$BIG" -gt 0 ] && printf '%-46s %10s\n' "ms per job, first 1000 of a queue of $BIG" "${R[qbig_ms_per_job]}"
printf '%-46s %10s\n' "start -> first claim, queue of 1000 (ms)" "${R[q1k_first_ms]}"
[ "$BIG" -gt 0 ] && printf '%-46s %10s\n' "start -> first claim, queue of $BIG (ms)" "${R[qbig_first_ms]}"
printf '%-46s %10s\n' "idle server: loop thread wake-ups per second" "${R[idle_loop_wakeups_per_s]}"
printf '%-46s %10s\n' "idle server: context switches/s, all threads" "${R[idle_wakeups_per_s]}"
printf '%-46s %10s\n' "kill -9 of the holder -> run again (ms)" "${R[takeback_ms]}"
printf '\nRESULT n=%s' "$N"
for k in fs raw_dir_enqueue raw_dir_claim raw_sqlite_1 raw_sqlite_64 raw_sqlite_normal_1 durable relaxed \
  idle_wakeups_per_s idle_loop_wakeups_per_s takeback_ms lat_p50_ms lat_p99_ms lat_max_ms q1k_ms_per_job qbig_ms_per_job \
  q1k_first_ms qbig_first_ms; do
  [ -z "${R[$k]:-}" ] || printf ' %s=%s' "$k" "${R[$k]}"
done
echo
