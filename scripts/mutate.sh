#!/usr/bin/env bash
# mutate.sh GREMLINS [PKG...] — mutation testing (github.com/go-gremlins/gremlins)
# over the packages whose tests guard the invariants; prints each package's
# kill ratio (killed of killed + lived; timed-out mutants count as killed,
# as gremlins does) and keeps the full reports in bin/mutate/<pkg>.log.
# Slow: every mutant is one `go test` of its package (api/validate ~12 min
# on 2 cores, scheduler/plan ~10 s a mutant). MUTATE_WORKERS (default 1)
# runs mutants in parallel; MUTATE_ARGS is passed to `gremlins unleash`,
# split at spaces and not unquoted: MUTATE_ARGS='-E (solve|view)\.go$'
# leaves files out, while MUTATE_ARGS="-E 'solve\.go$'" passes the quotes
# into the regexp, which then matches nothing. MUTATE_SINCE=<commit> mutates
# only the lines changed since that commit (gremlins --diff; a file added
# since counts whole). MUTATE_SKIP=<regexp> leaves out the tests it
# matches (go test -skip, through GOFLAGS: no spaces), for tests that read
# files outside the module, which gremlins' per-mutant copy of the module
# does not have (api/validate's TestDocsExample reads ../../docs). Not part
# of .ci/run.
set -uo pipefail
gremlins=$1; shift
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(api/validate proxy/internal/balance proxy/internal/configwatch scheduler/plan scheduler/internal/publish)
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bin/mutate
mkdir -p "$out"
status=0
goflags="-mod=mod${MUTATE_SKIP:+ -skip=$MUTATE_SKIP}"
# mutate_base ROOT COMMIT PKG DIR: a git repository in DIR (the staged
# package) whose HEAD holds PKG's .go files as of COMMIT (a file added since
# is absent from it), with the current files in the work tree.
mutate_base() {
  local root=$1 since=$2 pkg=$3 dir=$4 f keep
  keep=$(mktemp -d) || return 1
  cp -a "$dir"/*.go "$keep"/ || return 1
  git -C "$root" rev-parse --verify -q "$since^{commit}" >/dev/null || { echo "MUTATE_SINCE=$since: no such commit"; return 1; }
  for f in "$dir"/*.go; do
    f=${f##*/}
    if git -C "$root" cat-file -e "$since:$pkg/$f" 2>/dev/null; then
      git -C "$root" show "$since:$pkg/$f" >"$dir/$f" || return 1
    else
      rm "$dir/$f"
    fi
  done
  (cd "$dir" && git init -q && git add -A . && git -c user.name=mutate -c user.email=mutate@localhost commit -q -m "as of $since") || return 1
  cp -a "$keep"/*.go "$dir"/ && rm -rf "$keep"
}
for p in "${pkgs[@]}"; do
  mod=${p%%/*} dir=${p#*/}
  log=$out/${p//\//_}.log
  echo "== mutate $p"
  # gremlins copies only the module (the directory of go.mod) to a scratch
  # directory per mutant, where go.mod's `replace … => ../api` no longer
  # resolves: every mutant would then fail to build and count as KILLED.
  # So it runs on a copy of the module whose replaces point at this
  # checkout by absolute path, outside go.work.
  stage=$(mktemp -d)
  cp -a "$root/$mod" "$stage/$mod"
  sed -i -E "s#=> \.\./#=> $root/#" "$stage/$mod/go.mod"
  # A build or test that fails without any mutant would "kill" them all.
  if ! (cd "$stage/$mod" && GOWORK=off GOFLAGS="$goflags" go test -count=1 "./$dir") >"$log" 2>&1; then
    rm -rf "$stage"
    echo "mutate $p: the unmutated tests do not pass in the staged copy; see $log"; status=1; continue
  fi
  # No --test-cpu: gremlins v0.6.0 passes it to go test as the one argument
  # "-cpu N", which the test binary refuses ("flag provided but not
  # defined"): go test exits 1 and every mutant counts as KILLED.
  # gremlins --diff runs `git diff --merge-base REF` where it is started and
  # matches the names in it against the package's files (relative to the
  # package): with MUTATE_SINCE, a repository in the staged package whose
  # HEAD holds the package's files as of that commit, gremlins started there.
  run=("$stage/$mod" "./$dir") diffargs=()
  if [ -n "${MUTATE_SINCE:-}" ]; then
    pd=$stage/$mod/$dir
    if ! mutate_base "$root" "$MUTATE_SINCE" "$p" "$pd" >>"$log" 2>&1; then
      rm -rf "$stage"
      echo "mutate $p: cannot stage $p as of $MUTATE_SINCE; see $log"; status=1; continue
    fi
    run=("$pd" "$pd") diffargs=(--diff HEAD)
  fi
  if ! (cd "${run[0]}" && GOWORK=off GOFLAGS="$goflags" "$gremlins" unleash --workers "${MUTATE_WORKERS:-1}" --timeout-coefficient 3 "${diffargs[@]}" ${MUTATE_ARGS:-} "${run[1]}") >>"$log" 2>&1; then
    rm -rf "$stage"
    echo "mutate $p: gremlins failed; see $log"; status=1; continue
  fi
  rm -rf "$stage"
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
