#!/usr/bin/env bash
# bench/latency.sh — open-loop latency, nginx vs lean lbproxy only (s9-latency).
#
# The same layout as bench/run.sh (each proxy on core 0, one worker,
# GOMAXPROCS=1; backends and load generator on core 1; 4 backends 5/3/1/1),
# but only the fixed-rate phase, over several rates and connection counts:
# SCENARIOS is a list of rate/conns pairs. SPIN=N runs N busy loops on core 0
# during each phase (CPU contention on the proxies' core: CFS then gives a
# proxy about 1/(N+1) of it). Rounds alternate nginx and lbproxy within each
# scenario. Each line also gives the proxy's CPU µs per request in the phase.
#
# Usage: flock /tmp/bench.lock env ROUNDS=3 PHASE=5s SPIN=0 bench/latency.sh
set -euo pipefail
ROUNDS=${ROUNDS:-3}
PHASE=${PHASE:-5s}
SPIN=${SPIN:-0}
SCENARIOS=${SCENARIOS:-"2000/64 200/64 50/64 2000/8"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/snapshot.sh
. "$ROOT/bench/snapshot.sh"
WORK=$(mktemp -d /tmp/sluice-lat.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)
P=${PORT_BASE:-$("$WORK/benchtool" ports -n 40)}
B=(127.0.0.1:$((P + 20)) 127.0.0.1:$((P + 21)) 127.0.0.1:$((P + 22)) 127.0.0.1:$((P + 23)))
W=(5 3 1 1)
taskset -c 1 "$WORK/benchtool" backends -addrs "$(IFS=,; echo "${B[*]}")" & PIDS+=($!)
mkdir -p "$WORK/nginx.tmp"
{
  echo "worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/nginx.err;"
  echo "events { worker_connections 4096; }"
  echo "http { keepalive_requests 1000000; access_log off;"
  echo " client_body_temp_path $WORK/nginx.tmp; proxy_temp_path $WORK/nginx.tmp; fastcgi_temp_path $WORK/nginx.tmp; uwsgi_temp_path $WORK/nginx.tmp; scgi_temp_path $WORK/nginx.tmp;"
  echo " upstream be {"
  for i in 0 1 2 3; do echo "  server ${B[$i]} weight=${W[$i]};"; done
  echo "  keepalive 64; }"
  echo " server { listen 127.0.0.1:$P; location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }"
} > "$WORK/nginx.conf"
bench_snapshot '"bench.test"' "${B[0]}=${W[0]}" "${B[1]}=${W[1]}" "${B[2]}=${W[2]}" "${B[3]}=${W[3]}" > "$WORK/snapshot.json"
taskset -c 0 "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" & PIDS+=($!); NGINX_PID=$!
GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id lean --config "$WORK/snapshot.json" \
  --listen 127.0.0.1:$((P + 2)) --admin 127.0.0.1:$((P + 12)) --access-log off --trace-sample 0 2>"$WORK/lean.log" & PIDS+=($!); LEAN_PID=$!
declare -A URL=([nginx]=http://127.0.0.1:$P/ [lbproxy]=http://127.0.0.1:$((P + 2))/)
declare -A PID=([nginx]=$NGINX_PID [lbproxy]=$LEAN_PID)
for n in nginx lbproxy; do
  for i in $(seq 50); do curl -fs -o /dev/null -H 'Host: bench.test' "${URL[$n]}" && break; sleep 0.2; done
done
w=$(pgrep -P "$NGINX_PID" | head -1 || true) # nginx's worker, the child of the master
[ -n "$w" ] && PID[nginx]=$w
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; } # utime+stime, clock ticks
HZ=$(getconf CLK_TCK)
echo "load before: $(uptime)"
for sc in $SCENARIOS; do
  rate=${sc%/*}; conns=${sc#*/}
  for r in $(seq "$ROUNDS"); do
    for n in nginx lbproxy; do
      spins=()
      for s in $(seq "$SPIN"); do timeout 30 taskset -c 0 sh -c 'while :; do :; done' & spins+=($!); done
      t0=$(ticks "${PID[$n]}")
      out=$(GOGC=off taskset -c 1 "$WORK/benchtool" rate -url "${URL[$n]}" -rate "$rate" -conns "$conns" -duration "$PHASE")
      t1=$(ticks "${PID[$n]}")
      for s in "${spins[@]}"; do kill "$s" 2>/dev/null || true; wait "$s" 2>/dev/null || true; done
      reqs=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$out")
      cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$reqs" 'BEGIN{ printf "%.1f", (b-a)/hz*1e6/n }')
      echo "rate=$rate conns=$conns spin=$SPIN round=$r $n: $out cpu_us/req=$cpu load=$(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done
echo "load after: $(uptime)"
