# bench/rounds.sh — the round bookkeeping bench/run.sh and bench/tlsrun.sh
# share (sourced): the order rows run in, and medians of per-round figures.

# round_order R ROW...: the rows in round R's order, one a line — as listed
# in odd rounds, reversed in even ones, so that a drift of the host's speed
# falls on both sides of a pair.
round_order() {
  local r=$1 k
  shift
  if [ $((r % 2)) = 1 ]; then
    printf '%s\n' "$@"
  else
    for ((k = $#; k >= 1; k--)); do printf '%s\n' "${!k}"; done
  fi
}

# median: the median of the space-separated figures on stdin (the lower of
# the middle two for an even count), leaving out "-" and "nan"; nothing
# when none is left.
median() { tr ' ' '\n' | { grep -v -e '^$' -e '^-$' -e '^nan$' || true; } | sort -g | awk '{a[NR]=$1} END{ if (NR) print a[int((NR+1)/2)] }'; }

# rounds A B: two rows' per-round figures (space-separated, in round order):
# the per-round ratios A ÷ B ("-" where either is missing).
rounds() {
  awk -v a="$1" -v b="$2" 'BEGIN{ n = split(a, x, " "); split(b, y, " ")
    for (k = 1; k <= n; k++) printf "%s ", (y[k] != "nan" && y[k] > 0 && x[k] != "nan") ? sprintf("%.2f", x[k] / y[k]) : "-" }'
}
