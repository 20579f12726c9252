#!/usr/bin/env bash
# bench/callgrind.sh — what one plain keep-alive GET costs lbproxy and nginx
# in user space, counted rather than timed: instructions, simulated L1
# instruction- and data-cache misses and mispredicted branches per request,
# under valgrind's callgrind (deterministic to within a few instructions a
# request, so a change of 1 % shows, which no wall-clock run on this machine
# can). Then, with perf's syscall and scheduler tracepoints (no hardware
# counters needed), the system calls, context switches and softirqs per
# request of each, in a closed loop at full speed.
#
# The rig: the bench snapshot (bench/snapshot.sh), 4 backends (benchtool,
# weights 5/3/1/1) and h2load on core 1; the proxy alone on core 0 with one
# worker (GOMAXPROCS=1 for lbproxy, which runs with GODEBUG=asyncpreemptoff=1
# under valgrind: callgrind cannot follow Go's preemption signals). WARM
# requests (default 4 000) warm every connection, instrumentation is turned
# on, N requests (default 40 000: the steady state; with fewer, each of
# h2load's 64 new connections' stack growth shows in the count) are counted,
# then it is turned off and dumped. Counts are user space only: the kernel,
# about two thirds of a request's CPU on this rig, is in the second table.
#
# LBPROXY=path measures that build instead of building this tree's; NGINX=0
# skips nginx; PERF=0 skips the second table; RATE=n takes the second table at
# a fixed n requests a second (benchtool rate) instead of the closed loop, where
# the proxy waits for every request; KEEP=1 keeps the work directory (the
# callgrind.out files, for callgrind_annotate). Needs valgrind, h2load
# (nghttp2-client), nginx and perf (linux-perf).
#
# In the second table, "polls" counts epoll_wait/epoll_pwait calls and "poll0"
# those of them that do not wait (timeout 0): Go's scheduler looks once
# without waiting before its thread waits (runtime.findRunnable), nginx waits
# at once.
#
# Usage: N=40000 bench/callgrind.sh
set -euo pipefail
N=${N:-40000}
WARM=${WARM:-4000}
NGINX=${NGINX:-1}
PERF=${PERF:-1}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/snapshot.sh
. "$ROOT/bench/snapshot.sh"
WORK=$(mktemp -d /tmp/sluice-callgrind.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT
need=(valgrind callgrind_control callgrind_annotate h2load curl)
[ "$NGINX" = 0 ] || need+=(nginx)
[ "$PERF" = 0 ] || need+=(perf)
for t in "${need[@]}"; do command -v "$t" >/dev/null || { echo "callgrind.sh needs $t on the PATH" >&2; exit 2; }; done

if [ -z "${LBPROXY:-}" ]; then
  echo "building lbproxy..." >&2
  (cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
  LBPROXY=$WORK/lbproxy
fi
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)

# P+0 lbproxy, P+1 its admin, P+2 nginx, P+10..P+13 backends
P=${PORT_BASE:-$("$WORK/benchtool" ports -n 20)}
B=(127.0.0.1:$((P + 10)) 127.0.0.1:$((P + 11)) 127.0.0.1:$((P + 12)) 127.0.0.1:$((P + 13)))
W=(5 3 1 1)
taskset -c 1 "$WORK/benchtool" backends -addrs "$(IFS=,; echo "${B[*]}")" & PIDS+=($!)
bench_snapshot '"bench.test","127.0.0.1"' "${B[0]}=5" "${B[1]}=3" "${B[2]}=1" "${B[3]}=1" > "$WORK/snapshot.json"
mkdir -p "$WORK/tmp"
{
  echo "worker_processes 1; daemon off; master_process off; pid $WORK/nginx.pid; error_log $WORK/nginx.err;"
  echo "events { worker_connections 4096; }"
  echo "http { keepalive_requests 1000000; access_log off;"
  echo " client_body_temp_path $WORK/tmp; proxy_temp_path $WORK/tmp; fastcgi_temp_path $WORK/tmp; uwsgi_temp_path $WORK/tmp; scgi_temp_path $WORK/tmp;"
  echo " upstream be {"
  for i in 0 1 2 3; do echo "  server ${B[$i]} weight=${W[$i]};"; done
  echo "  keepalive 64; }"
  echo " server { listen 127.0.0.1:$((P + 2)); location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }"
} > "$WORK/nginx.conf"

lbproxy_cmd() {
  echo "$LBPROXY" --proxy-cluster BENCH --id callgrind --config "$WORK/snapshot.json" \
    --listen 127.0.0.1:$P --admin 127.0.0.1:$((P + 1)) --access-log off --trace-sample 0
}
nginx_cmd() { echo nginx -c "$WORK/nginx.conf" -p "$WORK"; }

up() { # $1: port
  for _ in $(seq 300); do
    curl -fs -o /dev/null -H 'Host: bench.test' "http://127.0.0.1:$1/" && return 0
    sleep 0.1 # waiting for the process (under valgrind: slow) to bind
  done
  echo "nothing answers on port $1" >&2
  return 1
}

# count NAME PORT CMD...: one callgrind run; prints the row.
count() {
  local name=$1 port=$2
  shift 2
  GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 taskset -c 0 valgrind --tool=callgrind --cache-sim=yes --branch-sim=yes \
    --instr-atstart=no --callgrind-out-file="$WORK/cg.$name" "$@" >"$WORK/$name.log" 2>&1 &
  local vp=$!
  PIDS+=($vp)
  up "$port"
  taskset -c 1 h2load --h1 -c64 -n "$WARM" "http://127.0.0.1:$port/" >/dev/null
  callgrind_control -i on $vp >/dev/null
  local ok
  ok=$(taskset -c 1 h2load --h1 -c64 -n "$N" "http://127.0.0.1:$port/" | awk '/^status codes:/{print $3}')
  callgrind_control -i off $vp >/dev/null
  callgrind_control -d $vp >/dev/null
  kill $vp
  wait $vp 2>/dev/null || true
  [ "$ok" = "$N" ] || { echo "$name: $ok of $N requests answered 2xx" >&2; return 1; }
  # The dump taken while running is the largest file (the one at exit counts nothing).
  local f
  f=$(ls -S "$WORK/cg.$name"* | head -1)
  callgrind_annotate "$f" 2>/dev/null | awk -v n="$N" -v name="$name" '/PROGRAM TOTALS/ {
    for (i = 1; i <= NF; i++) gsub(",", "", $i)
    # Ir (Dr) (Dw) I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim, each "value (percent)"
    printf "%-8s %8.0f %8.0f %8.0f %8.0f %8.0f\n", name, $1/n, $7/n, $9/n, $11/n, $21/n }'
}

echo "instructions and simulated cache misses per request, user space ($N requests after $WARM, 64 connections):"
printf "%-8s %8s %8s %8s %8s %8s\n" proxy Ir I1-miss D1r-miss D1w-miss Bc-miss
# shellcheck disable=SC2046
count lbproxy $P $(lbproxy_cmd)
# shellcheck disable=SC2046
[ "$NGINX" = 0 ] || count nginx $((P + 2)) $(nginx_cmd)

[ "$PERF" = 0 ] && exit 0
echo
load="closed loop"
[ -z "${RATE:-}" ] || load="$RATE requests a second"
echo "kernel events per request (perf tracepoints, $load, 64 connections, 4 s after 1 s):"
EV=raw_syscalls:sys_enter,sched:sched_switch,irq:softirq_entry,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait
# The same two events again, only the calls that do not wait (perf names
# them alike: the filtered ones come last in the output).
POLL0=(-e syscalls:sys_enter_epoll_wait --filter "timeout == 0" -e syscalls:sys_enter_epoll_pwait --filter "timeout == 0")
printf "%-8s %9s %9s %9s %9s %9s\n" proxy syscalls polls poll0 switches softirqs
# drive PORT DURATION: the load of the second table; prints the requests answered.
drive() {
  if [ -n "${RATE:-}" ]; then
    taskset -c 1 "$WORK/benchtool" rate -url "http://127.0.0.1:$1/" -rate "$RATE" -duration "$2" | sed -E 's/.*requests=([0-9]+).*/\1/'
  else
    taskset -c 1 h2load --h1 -c64 -D "${2%s}" "http://127.0.0.1:$1/" | awk '/^requests:/{print $8}'
  fi
}
# events NAME PORT PID
events() {
  local name=$1 port=$2 pid=$3
  drive "$port" 1s >/dev/null
  perf stat -x, -e "$EV" "${POLL0[@]}" -p "$pid" -o "$WORK/perf.$name" -- sleep 5 & local ps=$!
  sleep 0.2 # perf attaches
  local n
  n=$(drive "$port" 4s)
  wait $ps
  awk -F, -v n="$n" -v name="$name" '$1 ~ /^[0-9]+$/ { k = $3; if (k in v) k = k "/0"; v[k] = $1 / n }
    END { printf "%-8s %9.2f %9.2f %9.2f %9.2f %9.2f\n", name, v["raw_syscalls:sys_enter"],
      v["syscalls:sys_enter_epoll_wait"] + v["syscalls:sys_enter_epoll_pwait"],
      v["syscalls:sys_enter_epoll_wait/0"] + v["syscalls:sys_enter_epoll_pwait/0"], v["sched:sched_switch"], v["irq:softirq_entry"] }' "$WORK/perf.$name"
}
# shellcheck disable=SC2046
GOMAXPROCS=1 taskset -c 0 $(lbproxy_cmd) 2>"$WORK/lbproxy-perf.log" & PIDS+=($!)
LP=$!
up $P
events lbproxy $P $LP
if [ "$NGINX" != 0 ]; then
  # shellcheck disable=SC2046
  taskset -c 0 $(nginx_cmd) & PIDS+=($!)
  NP=$!
  up $((P + 2))
  events nginx $((P + 2)) $NP
fi
