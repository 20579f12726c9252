#!/usr/bin/env bash
# bench/picks.sh — every instance algorithm's pick at 1 000 and 10 000
# instances against wrr's at 4, issue 20's targets: within 2× at 1 000 and
# 3× at 10 000, "in the same run".
#
# It runs proxy/internal/balance's BenchmarkPickVsWRR, pinned to core 0
# (taskset), COUNT times (default 5): each time a row builds its two
# clusters afresh and times them by turns, 4 096 picks a turn, on the
# thread's CPU clock, so that a change in the host's speed (a neighbour on
# the core's other hardware thread) falls on both sides of the ratio. The
# table gives, per row, the median of the COUNT ratios, their range, the
# median CPU ns of a pick of each side, and "over" where the median misses
# the target. Measures only: the exit status says whether it ran, not
# whether the targets were met.
#
# Usage: COUNT=5 PICKS=300000 bash bench/picks.sh
#   PICKS is the picks per side and count (-test.benchtime PICKSx);
#   FILTER narrows the rows (a regexp over "algorithm/n=N", default all).
set -euo pipefail
COUNT=${COUNT:-5}
PICKS=${PICKS:-300000}
FILTER=${FILTER:-.}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/sluice-picks.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
PIN=()
if command -v taskset >/dev/null; then PIN=(taskset -c 0); fi

echo "building proxy/internal/balance's tests..." >&2
(cd "$ROOT" && go test -c -o "$WORK/balance.test" ./proxy/internal/balance)
echo "BenchmarkPickVsWRR, $COUNT × $PICKS picks a side, $(date -u +%H:%MZ) (core 0)..." >&2
(cd "$WORK" && "${PIN[@]}" ./balance.test -test.run '^$' -test.bench "BenchmarkPickVsWRR/$FILTER" \
  -test.benchtime "${PICKS}x" -test.count "$COUNT") >"$WORK/out.txt"

awk '
/^BenchmarkPickVsWRR\// {
  name = $1; sub(/^BenchmarkPickVsWRR\//, "", name); sub(/-[0-9]+$/, "", name)
  for (i = 2; i < NF; i++) {
    if ($(i+1) == "x-wrr4") x = $i
    if ($(i+1) == "cpu-ns/op") c = $i
    if ($(i+1) == "wrr4-cpu-ns/op") w = $i
  }
  if (!(name in n)) order[++rows] = name
  k = ++n[name]; X[name, k] = x; C[name, k] = c; W[name, k] = w
}
function median(A, name, m,    i, j, t, v) {
  for (i = 1; i <= m; i++) v[i] = A[name, i]
  for (i = 2; i <= m; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
  return m % 2 ? v[(m+1)/2] : (v[m/2] + v[m/2+1]) / 2
}
END {
  if (rows == 0) { print "picks.sh: no BenchmarkPickVsWRR rows in the output" > "/dev/stderr"; exit 1 }
  printf "%-34s %7s %13s %9s %9s  %s\n", "row", "÷ wrr4", "range", "pick ns", "wrr4 ns", "target"
  over = 0
  for (r = 1; r <= rows; r++) {
    name = order[r]; m = n[name]
    lo = hi = X[name, 1]
    for (i = 2; i <= m; i++) { if (X[name, i] < lo) lo = X[name, i]; if (X[name, i] > hi) hi = X[name, i] }
    target = name ~ /n=10000$/ ? 3 : 2
    mx = median(X, name, m)
    mark = mx <= target ? "≤ " target : "OVER " target
    if (mx > target) over++
    printf "%-34s %7.2f %6.2f–%-6.2f %9.1f %9.1f  %s\n", name, mx, lo, hi, median(C, name, m), median(W, name, m), mark
  }
  printf "%d of %d rows over their target (median of %d counts)\n", over, rows, m
}' "$WORK/out.txt"
