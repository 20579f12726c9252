#!/usr/bin/env bash
# Runs every fuzz target of every module for the given time (default 10s).
set -euo pipefail
t=${1:-10s}
cd "$(dirname "$0")/.."
grep -rl --include='*_test.go' '^func Fuzz' api probe proxy scheduler agent cli integration testkit 2>/dev/null | sort | while read -r f; do
  dir=$(dirname "$f"); mod=${dir%%/*}
  for target in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //'); do
    echo "== fuzz $dir $target ($t)"
    (cd "$mod" && go test -run='^$' -fuzz="^${target}\$" -fuzztime="$t" -fuzzminimizetime=10s "./${dir#*/}")
  done
done
