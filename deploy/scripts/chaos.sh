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
# Every docker call of the teardown is bounded: Debian's docker.io 20.10 can
# deadlock in libnetwork when containers on user-defined networks exit at the
# same time (getSvcRecords against processEndpointDelete, moby/moby#42545,
# fixed after 20.10.24), and the daemon then never answers about networks
# again. Seen once at the end of a CI run: every scenario had passed, and
# `docker network ls` hung until the job's limit. So the fleet is stopped one
# container at a time (one exit at once), and a daemon that stopped answering
# is restarted under CI=true (the machine is the job's) and the teardown made
# again; elsewhere the script says how to recover and fails the teardown.
bound=${CHAOS_DOCKER_TIMEOUT:-90} # seconds, each docker call
bounded() { timeout "$bound" "$@"; }
project=(--filter label=com.docker.compose.project=sluice)
answering() { timeout 20 docker network ls -q >/dev/null 2>&1; }
restart_dockerd() {
  local pid
  pid=$(pgrep -xo dockerd) || return 1
  echo "chaos: the docker daemon stopped answering (the libnetwork deadlock of docker 20.10, moby/moby#42545); restarting it (CI=true)" >&2
  kill -TERM "$pid"
  for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
    for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f /var/run/docker.pid # a killed daemon leaves it, and a new one refuses to start on it
  setsid /usr/sbin/dockerd >>/var/log/dockerd.log 2>&1 </dev/null &
  for _ in $(seq 120); do answering && return 0; sleep 0.5; done
  echo "chaos: the restarted docker daemon does not answer either" >&2
  return 1
}
# notHung: a bounded call's status $1 was not its timeout (124). A call that
# timed out ends the teardown at once: the daemon is stuck, the calls after
# it would each wait their whole bound too.
notHung() { [ "$1" != 124 ]; }
teardown() {
  local c ids
  # The deadlock shows first in what the daemon says of its networks.
  answering || return 1
  # A paused container cannot be stopped: resume any the suite left frozen.
  ids=$(bounded docker ps -q "${project[@]}" --filter status=paused) || notHung $? || return 1
  for c in $ids; do
    bounded docker unpause "$c" >/dev/null 2>&1 || notHung $? || return 1
  done
  ids=$(bounded docker ps -q "${project[@]}") || notHung $? || return 1
  for c in $ids; do
    bounded docker stop -t 5 "$c" >/dev/null 2>&1 || notHung $? || return 1
  done
  # shellcheck disable=SC2086 # $compose may be two words (docker compose)
  (cd "$cdir" && bounded $compose -p sluice --profile tools down -v --remove-orphans --timeout 5) >/dev/null 2>&1 || notHung $? || return 1
  # Networks of an older compose file are not known to `down`.
  bounded docker network ls -q "${project[@]}" | xargs -r timeout "$bound" docker network rm >/dev/null 2>&1
  # `down` stops at the first network it cannot remove (docker 20.10 can keep
  # a stale endpoint after network disconnect/connect) and then leaves the
  # volumes: remove them by label, or the next fleet starts on the old etcd
  # data, certificates and caches (and the debian pass on the embedded
  # etcd's data directory).
  bounded docker volume ls -q "${project[@]}" | xargs -r timeout "$bound" docker volume rm >/dev/null 2>&1
  answering
}
cleanup() {
  if ! teardown; then
    if [ "${CI:-}" != true ]; then
      echo "chaos: the docker daemon stopped answering during the teardown (docker 20.10's libnetwork deadlock, moby/moby#42545): restart it (e.g. systemctl restart docker), then make deploy-down" >&2
      return 1
    fi
    restart_dockerd || return 1
    teardown || return 1
  fi
  local left
  left=$(bounded docker volume ls -q "${project[@]}")
  if [ -n "$left" ]; then
    echo "chaos: volumes of project sluice still there after the teardown: $(echo "$left" | tr '\n' ' ')" >&2
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
  for c in $(bounded docker ps -aq "${project[@]}"); do
    n=$(bounded docker inspect --format '{{.Name}}' "$c" | sed 's#^/##')
    bounded docker logs "$c" >"$out/logs/$n.log" 2>&1 || true
  done
  echo "chaos ($flavour etcd): FAILED (rc=$rc); container logs in $out/logs" >&2
else
  echo "chaos ($flavour etcd): all scenarios passed in $((SECONDS - start))s"
fi
exit "$rc"
