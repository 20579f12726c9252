#!/usr/bin/env bash
# chaos.sh COMPOSE TIMEOUT RUN — the chaos suite against a fresh compose
# fleet. Records go to deploy/chaos/out/<time>/ (outcomes, versions, backend
# stats and a summary per scenario; container logs when something failed).
# The fleet is always torn down (containers, networks, volumes), also on
# failure or interrupt. Needs `make images` first (make chaos does it).
set -uo pipefail
compose=${1:-docker-compose}
timeout=${2:-25m}
run=${3:-.}
root=$(cd "$(dirname "$0")/../.." && pwd)
cdir=$root/deploy/compose
out=$root/deploy/chaos/out/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"

C() { (cd "$cdir" && $compose -p sluice "$@"); }
cleanup() {
  # A paused container cannot be stopped: resume any the suite left frozen.
  for c in $(docker ps -q --filter label=com.docker.compose.project=sluice --filter status=paused); do
    docker unpause "$c" >/dev/null 2>&1 || true
  done
  C --profile tools down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
  # Networks of an older compose file are not known to `down`.
  docker network ls -q --filter label=com.docker.compose.project=sluice | xargs -r docker network rm >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cleanup
"$root/deploy/.build/deploy-init" secrets --env-file "$cdir/.env" --extra COMPOSE_PROJECT_NAME=sluice
start=$SECONDS
C up -d >"$out/compose-up.log" 2>&1 || { cat "$out/compose-up.log"; exit 1; }
bash "$root/deploy/scripts/wait-healthy.sh" sluice 180 || exit 1
echo "fleet up in $((SECONDS - start))s; records in $out"

(cd "$root/integration" && SLUICE_CHAOS_OUT="$out" SLUICE_COMPOSE_DIR="$cdir" \
  go test -tags chaos -count=1 -timeout "$timeout" -v -run "TestAccess|TestChaos/$run" ./chaos/) 2>&1 | tee "$out/test.log" \
  | grep --line-buffered -E '^(=== chaos|--- chaos|    [a-z0-9-]+:|--- FAIL|FAIL|ok|PASS|panic|\s+\S+_test\.go:[0-9]+:)'
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ]; then
  mkdir -p "$out/logs"
  for c in $(docker ps -aq --filter label=com.docker.compose.project=sluice); do
    n=$(docker inspect --format '{{.Name}}' "$c" | sed 's#^/##')
    docker logs "$c" >"$out/logs/$n.log" 2>&1 || true
  done
  echo "chaos: FAILED (rc=$rc); container logs in $out/logs" >&2
else
  echo "chaos: all scenarios passed in $((SECONDS - start))s"
fi
exit "$rc"
