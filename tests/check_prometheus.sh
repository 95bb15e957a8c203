#!/usr/bin/env bash
# contrib/prometheus/alerts.yml passes promtool (Debian's prometheus package).
set -euo pipefail
src=${1:-.}
command -v promtool >/dev/null || { echo "check_prometheus: promtool missing (bash scripts/setup.sh)"; exit 1; }
promtool check rules "$src/contrib/prometheus/alerts.yml"
