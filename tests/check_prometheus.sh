#!/usr/bin/env bash
# The monitoring examples work: contrib/prometheus/alerts.yml passes promtool (Debian's
# prometheus package); contrib/grafana/mqproc.json is a dashboard whose every panel has
# queries, each of which promtool parses as PromQL; and every metric either names is one
# mqproc exposes (src/base/metrics.c).
set -euo pipefail
src=${1:-.}
fail() { echo "check_prometheus: FAIL: $*" >&2; exit 1; }
command -v promtool >/dev/null || fail "promtool missing (bash scripts/setup.sh --tests)"
command -v jq >/dev/null || fail "jq missing (bash scripts/setup.sh --tests)"
promtool check rules "$src/contrib/prometheus/alerts.yml"

g=$src/contrib/grafana/mqproc.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
jq -e '.title and (.panels | length) > 0 and all(.panels[]; (.targets | length) > 0)' "$g" \
  >/dev/null || fail "$g: a dashboard with panels, each with queries"
# Grafana's variables as a plain matcher, each query a recording rule for promtool
jq -r '.panels[].targets[].expr' "$g" | sed 's/\$processor/.*/g' >"$tmp/exprs"
{
  printf 'groups:\n  - name: grafana\n    rules:\n'
  i=0
  while IFS= read -r e; do
    i=$((i + 1))
    printf '      - record: grafana:panel_query_%d\n        expr: %s\n' "$i" "$(jq -Rn --arg e "$e" '$e')"
  done <"$tmp/exprs"
} >"$tmp/rules.yml"
promtool check rules "$tmp/rules.yml" >/dev/null || fail "a Grafana query is not PromQL"

# the alert expressions (expr: to the next key), then every metric name used
awk '/^ *expr:/ {on = 1} /^ *(for|labels|annotations):/ {on = 0} on' \
  "$src/contrib/prometheus/alerts.yml" >>"$tmp/exprs"
names=$(grep -oE '\b(mqproc|process)_[a-z_]+' "$tmp/exprs" | sed -E 's/_(bucket|sum|count)$//' | sort -u)
[ -n "$names" ] || fail "no metric names found"
for n in $names; do
  grep -qE "$n([^a-z_]|$)" "$src/src/base/metrics.c" || fail "$n is not a metric mqproc exposes (src/base/metrics.c)"
done
echo "check_prometheus: OK ($(wc -l <"$tmp/exprs") query lines, $(echo "$names" | wc -l) metrics)"
