#!/usr/bin/env bash
# mutate.sh GREMLINS [PKG...] — mutation testing (github.com/go-gremlins/gremlins)
# over the packages whose tests guard the invariants; prints each package's
# kill ratio (killed of killed + lived; timed-out mutants count as killed,
# as gremlins does) and keeps the full reports in bin/mutate/<pkg>.log.
# Slow: every mutant is one `go test` of its package (api/validate ~10 min
# on 2 cores). Not part of .ci/run.
set -uo pipefail
gremlins=$1; shift
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(api/validate proxy/balance proxy/configwatch scheduler/plan scheduler/publish)
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bin/mutate
mkdir -p "$out"
status=0
for p in "${pkgs[@]}"; do
  mod=${p%%/*} dir=${p#*/}
  log=$out/${p//\//_}.log
  echo "== mutate $p"
  if ! (cd "$root/$mod" && "$gremlins" unleash --workers "${MUTATE_WORKERS:-1}" --test-cpu 1 --timeout-coefficient 3 "./$dir") >"$log" 2>&1; then
    echo "mutate $p: gremlins failed; see $log"; status=1; continue
  fi
  killed=$(sed -n 's/^Killed: \([0-9]*\),.*/\1/p' "$log" | tail -1)
  lived=$(sed -n 's/.*Lived: \([0-9]*\),.*/\1/p' "$log" | tail -1)
  timed=$(sed -n 's/^Timed out: \([0-9]*\),.*/\1/p' "$log" | tail -1)
  nc=$(sed -n 's/.*Not covered: \([0-9]*\).*/\1/p' "$log" | tail -1)
  eff=$(sed -n 's/^Test efficacy: \(.*\)$/\1/p' "$log" | tail -1)
  printf 'mutate %-20s killed %s of %s (efficacy %s); %s timed out (counted killed), %s not covered\n' \
    "$p" "$((killed + timed))" "$((killed + timed + lived))" "$eff" "$timed" "$nc"
  grep ' LIVED ' "$log" | sed 's/^ */    lived: /' || true
done
exit $status
