#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz/ (clang 14 from Debian, ASan + UBSan +
# libFuzzer's coverage on all of mqproc's own code) and prints a table of executions.
#
#   bash bench/fuzz.sh                      # each target for 5 minutes
#   bash bench/fuzz.sh --minutes 20 message yaml
#   bash bench/fuzz.sh --runs 10000000      # each target until 10 million executions
#
# The working corpus grows in build/fuzz/corpus/TARGET (seeded from tests/fuzz/corpus/;
# copy new inputs worth keeping there, `-merge=1` minimises). A crash, a leak or a broken
# property stops that target, leaves the input in build/fuzz/artifacts/TARGET/ and makes
# the script exit 1: fix it and add the input to tests/fuzz/corpus/TARGET/, where every CI
# run replays it (ctest -R fuzz/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
minutes=5 runs=-1 targets=()
while [ $# -gt 0 ]; do
  case "$1" in
  --minutes) minutes=$2; shift 2 ;;
  --runs) runs=$2; minutes=0; shift 2 ;;
  -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
  *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(message yaml argv dirq url ocrd_argv)
if ! command -v clang >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: installing clang and libclang-rt-14-dev (libFuzzer)" >&2
  apt-get install -y --no-install-recommends clang libclang-rt-14-dev >/dev/null
fi

B=build/fuzz
cmake -S . -B $B -DCMAKE_C_COMPILER=clang -DMQPROC_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build $B -j"$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}") >/dev/null

rc=0 rows=()
for t in "${targets[@]}"; do
  mkdir -p $B/corpus/$t $B/artifacts/$t
  dict=()
  case $t in message | yaml) dict=(-dict=tests/fuzz/message.dict) ;; esac
  log=$B/fuzz-$t.log
  echo "=== fuzz_$t (${minutes} min, runs ${runs})" >&2
  start=$(date +%s)
  set +e
  ASAN_OPTIONS=detect_leaks=1 $B/tests/fuzz/fuzz_$t -max_total_time=$((minutes * 60)) -runs="$runs" \
    -rss_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix=$B/artifacts/$t/ "${dict[@]}" $B/corpus/$t tests/fuzz/corpus/$t >"$log" 2>&1
  status=$?
  set -e
  secs=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  found=$(ls $B/artifacts/$t | wc -l)
  [ $status -eq 0 ] && [ "$found" -eq 0 ] || rc=1
  rows+=("$(printf '| %-8s | %12s | %8s | %6s | %6s | %5s | %s |' "$t" "${execs:-?}" "${rate:-?}" \
    "${cov:-?}" "$(ls $B/corpus/$t | wc -l)" "$secs" "$([ "$found" -eq 0 ] && echo none || echo "$found: $B/artifacts/$t")")")
done
echo
echo "| target   | executions   | exec/s   | cov    | corpus | s     | found |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
exit $rc
