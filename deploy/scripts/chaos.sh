#!/usr/bin/env bash
# chaos.sh COMPOSE TIMEOUT RUN FLAVOUR — the chaos suite against a fresh
# compose fleet whose etcd members run FLAVOUR: "embedded" (sluice/etcd, our
# etcd module; every scenario) or "debian" (sluice/etcd-debian, Debian's
# etcd-server 3.4; the scenarios marked etcd in integration/chaos). Records
# go to deploy/chaos/out/<time>-<flavour>/ (outcomes, versions, backend
# stats and a summary per scenario; container logs when something failed).
# The fleet is always torn down (containers, networks, volumes), also on
# failure or interrupt. Needs `make images` first (make chaos does it).
set -uo pipefail
compose=${1:-docker-compose}
timeout=${2:-25m}
run=${3:-.}
flavour=${4:-embedded}
root=$(cd "$(dirname "$0")/../.." && pwd)
cdir=$root/deploy/compose
case "$flavour" in
  embedded) export SLUICE_ETCD_IMAGE=sluice/etcd:dev ;;
  debian)
    export SLUICE_ETCD_IMAGE=sluice/etcd-debian:dev
    if ! docker image inspect "$SLUICE_ETCD_IMAGE" >/dev/null 2>&1; then
      if [ "${CI:-}" = true ]; then
        echo "chaos: no $SLUICE_ETCD_IMAGE (Debian's etcd-server missing at make images): FAIL under CI" >&2
        exit 1
      fi
      echo "chaos: no $SLUICE_ETCD_IMAGE (apt-get install etcd-server, then make images): debian pass NOT RUN" >&2
      exit 0
    fi ;;
  *) echo "chaos: unknown etcd flavour $flavour (want embedded or debian)" >&2; exit 2 ;;
esac
out=$root/deploy/chaos/out/$(date -u +%Y%m%dT%H%M%SZ)-$flavour
mkdir -p "$out"
echo "== chaos against $flavour etcd ($SLUICE_ETCD_IMAGE)"

C() { (cd "$cdir" && $compose -p sluice "$@"); }
cleanup() {
  # A paused container cannot be stopped: resume any the suite left frozen.
  for c in $(docker ps -q --filter label=com.docker.compose.project=sluice --filter status=paused); do
    docker unpause "$c" >/dev/null 2>&1 || true
  done
  C --profile tools down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
  # Networks of an older compose file are not known to `down`.
  docker network ls -q --filter label=com.docker.compose.project=sluice | xargs -r docker network rm >/dev/null 2>&1 || true
  # `down` stops at the first network it cannot remove (docker 20.10 can keep
  # a stale endpoint after network disconnect/connect) and then leaves the
  # volumes: remove them by label, or the next fleet starts on the old etcd
  # data, certificates and caches (and the debian pass on the embedded
  # etcd's data directory).
  docker volume ls -q --filter label=com.docker.compose.project=sluice | xargs -r docker volume rm >/dev/null 2>&1 || true
  if [ -n "$(docker volume ls -q --filter label=com.docker.compose.project=sluice)" ]; then
    echo "chaos: volumes of project sluice still there after the teardown: $(docker volume ls -q --filter label=com.docker.compose.project=sluice | tr '\n' ' ')" >&2
    return 1
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cleanup || exit 1
"$root/deploy/.build/deploy-init" secrets --env-file "$cdir/.env" --extra COMPOSE_PROJECT_NAME=sluice
start=$SECONDS
C up -d >"$out/compose-up.log" 2>&1 || { cat "$out/compose-up.log"; exit 1; }
bash "$root/deploy/scripts/wait-healthy.sh" sluice 180 || exit 1
echo "fleet up in $((SECONDS - start))s; records in $out"

(cd "$root/integration" && SLUICE_CHAOS_OUT="$out" SLUICE_COMPOSE_DIR="$cdir" SLUICE_ETCD_FLAVOUR="$flavour" \
  go test -tags chaos -count=1 -timeout "$timeout" -v -run "TestAccess|TestChaos/$run" ./chaos/) 2>&1 | tee "$out/test.log" \
  | grep --line-buffered -E '^(=== chaos|--- chaos|    [a-z0-9-]+:|--- FAIL|FAIL|ok|PASS|panic|\s+\S+_test\.go:[0-9]+:)'
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ]; then
  mkdir -p "$out/logs"
  for c in $(docker ps -aq --filter label=com.docker.compose.project=sluice); do
    n=$(docker inspect --format '{{.Name}}' "$c" | sed 's#^/##')
    docker logs "$c" >"$out/logs/$n.log" 2>&1 || true
  done
  echo "chaos ($flavour etcd): FAILED (rc=$rc); container logs in $out/logs" >&2
else
  echo "chaos ($flavour etcd): all scenarios passed in $((SECONDS - start))s"
fi
exit "$rc"
