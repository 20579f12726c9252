#!/usr/bin/env bash
# bench/run.sh — lbproxy vs nginx vs HAProxy vs direct, side by side.
#
# Each proxy is pinned to core 0 with one worker (GOMAXPROCS=1 for lbproxy);
# the load generator and the 4 backends (weights 5/3/1/1, 100-byte bodies)
# run on core 1. Rounds are interleaved, the rows in the listed order in odd
# rounds and reversed in even ones (A B C D D C B A ...: a drift of the
# host's speed falls on both sides of a pair; bench/rounds.sh), and the
# medians printed: req/s (closed loop, 64 keep-alive connections), proxy CPU
# µs per request (utime+stime from /proc/<pid>/stat) in that closed loop and again
# at a fixed CPU_RATE req/s (open loop, default 8000: every proxy under the
# same load, so batching does not differ with throughput), and p50/p99 at a
# fixed 2000 req/s (open loop), with ratios to nginx: each "÷" is the median
# of the per-round ratios (a row against the other row's phase of the same
# round, seconds apart), not a ratio of medians, as in bench/tlsrun.sh; the
# per-round ratios are printed under the table. The last column is the
# backend process's CPU per request in the closed loop: when it rises (1 000
# instances: 1 000 backend connections) the closed loop runs slower and every
# proxy batches less, which the fixed-rate column does not suffer from. The
# load generator runs with GOGC=off (a few hundred MB per phase): its own
# garbage collection would otherwise add to the latencies it measures. Before
# its measured phases each row gets WARMUP (default 1s, 0: none) of the same
# closed loop, unmeasured: a row waits through every other row's turn (30 s
# or more), longer than lbproxy's upstream idle timeout (30 s; nginx's 60 s
# with all nine rows), so without it the closed loop would also count
# refilling the upstream pool — for lbproxy-1k some 1 400 connects, one per
# ten requests — instead of the steady state every row is compared in.
# lbproxy runs five times:
#   lbproxy       lean: access log and tracing off (metrics are always on),
#                 the defaults: fasthttp front, fast upstream client
#   lbproxy-net   lean with --front std (net/http server for the plain listener)
#   lbproxy-std   lean with --upstream-client std (ReverseProxy + Transport; net/http front)
#   lbproxy-full  access log to a file (64 KiB buffer flushed every second, as
#                 nginx's access_log buffer=64k flush=1s), retries on (policy
#                 defaults), 1 % trace sampling exported over OTLP/HTTP to a
#                 local sink (benchtool sink)
#   lbproxy-1k    lean, one cluster of 1 000 instances (the 4 backends + 996
#                 more listeners of the same backend process, weight 1 each)
#   lbproxy-log, lbproxy-trace, lbproxy-trace0 (measured when in NAMES): the
#                 full configuration's features one at a time, below
# floor (measured when in NAMES) is not a proxy but a measuring stick:
# benchtool floor, the least a Go proxy does per request with a goroutine per
# connection on the runtime's poller (lbproxy's system calls, no HTTP parsing,
# routing, pool or metrics; bench/benchtool/floor.go), GOMAXPROCS=1 as
# lbproxy. evfloor is the same work in nginx's model: one thread running its
# own epoll loop, no runtime poller, no goroutine switch (evfloor.go).
# lbproxy ÷ floor is what lbproxy's own work costs, floor ÷ nginx how far
# below nginx a Go proxy can go, evfloor ÷ floor what an own event loop
# would change.
# nginx runs twice: nginx (access_log off) and nginx-log (a JSON access log
# of about lbproxy's fields, access_log ... buffer=64k flush=1s), the row
# lbproxy-full is to be compared with.
#
# ALT=path/to/lbproxy adds the rows lbproxy-alt (that build, lean flags),
# lbproxy-alt-full (that build, full flags) and lbproxy-alt-1k (that build,
# the 1 000-instance cluster; put them in NAMES) for an A/B of two builds in
# one run; the script then prints the ratios of this build to that one.
#
# Ports: a block of 1 040 consecutive loopback ports free at start (benchtool
# ports, below the ephemeral range), or PORT_BASE=N to choose it.
#
# Usage: ROUNDS=3 DURATION=10s RATE=2000 PHASE=5s bench/run.sh   (make bench: DURATION=5s PHASE=4s)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
RATE=${RATE:-2000}
CPU_RATE=${CPU_RATE:-8000}
PHASE=${PHASE:-5s} # each of the two fixed-rate phases
WARMUP=${WARMUP:-1s} # unmeasured closed loop before each row's phases (0: none)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/snapshot.sh
. "$ROOT/bench/snapshot.sh"
# shellcheck source=bench/rounds.sh
. "$ROOT/bench/rounds.sh"
WORK=$(mktemp -d /tmp/sluice-bench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1; }
if ! need nginx || ! need haproxy; then
  echo "installing nginx and haproxy (Debian packages)..." >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx haproxy) >&2
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

echo "building lbproxy and benchtool..." >&2
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)

# Port layout: P+0..P+9 proxies, P+10..P+19 their admin listeners, P+20..P+23
# the 4 backends, P+24..P+26 the per-feature proxies (admin P+34..P+36), P+30 the
# trace sink, P+31/P+32 lbproxy-alt-1k and its admin listener, P+37 floor, P+38 evfloor,
# P+40..P+1035 the 996 more instances.
P=${PORT_BASE:-$("$WORK/benchtool" ports -n 1040)}
echo "ports $P-$((P + 1039))" >&2
B=(127.0.0.1:$((P + 20)) 127.0.0.1:$((P + 21)) 127.0.0.1:$((P + 22)) 127.0.0.1:$((P + 23)))
W=(5 3 1 1)
EXTRA=() # the 996 more instances of the 1 000-instance cluster
for p in $(seq $((P + 40)) $((P + 1035))); do EXTRA+=("127.0.0.1:$p"); done
ALL=("${B[@]}" "${EXTRA[@]}")
taskset -c 1 "$WORK/benchtool" backends -addrs "$(IFS=,; echo "${ALL[*]}")" & PIDS+=($!); BACKENDS_PID=$!
taskset -c 1 "$WORK/benchtool" sink -addr 127.0.0.1:$((P + 30)) & PIDS+=($!)

# --- configurations ---------------------------------------------------------
nginxconf() { # $1: name (pid, error log and temp files), $2: port, $3: the access_log directive
  echo "worker_processes 1; daemon off; pid $WORK/$1.pid; error_log $WORK/$1.err;"
  echo "events { worker_connections 4096; }"
  echo "http { keepalive_requests 1000000;"
  # about the fields of lbproxy's JSON access line (time, method, host, path,
  # client, upstream, status, duration, query, bytes, upstream timings, an id)
  echo " log_format sluice escape=json '{\"time\":\"\$time_iso8601\",\"method\":\"\$request_method\",\"host\":\"\$host\",'"
  echo "  '\"path\":\"\$uri\",\"client_ip\":\"\$remote_addr\",\"instance\":\"\$upstream_addr\",\"status\":\$status,'"
  echo "  '\"duration\":\$request_time,\"query\":\"\$args\",\"bytes_in\":\$request_length,\"bytes_out\":\$bytes_sent,'"
  echo "  '\"upstream_header_time\":\"\$upstream_header_time\",\"upstream_connect_time\":\"\$upstream_connect_time\",\"request_id\":\"\$request_id\"}';"
  echo " $3"
  echo " client_body_temp_path $WORK/$1.tmp; proxy_temp_path $WORK/$1.tmp; fastcgi_temp_path $WORK/$1.tmp; uwsgi_temp_path $WORK/$1.tmp; scgi_temp_path $WORK/$1.tmp;"
  echo " upstream be {"
  for i in 0 1 2 3; do echo "  server ${B[$i]} weight=${W[$i]};"; done
  echo "  keepalive 64; }"
  echo " server { listen 127.0.0.1:$2; location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }"
}
mkdir -p "$WORK/nginx.tmp" "$WORK/nginx-log.tmp"
nginxconf nginx "$P" "access_log off;" > "$WORK/nginx.conf"
nginxconf nginx-log $((P + 7)) "access_log $WORK/nginx-access.log sluice buffer=64k flush=1s;" > "$WORK/nginx-log.conf"
{
  echo "global"; echo "  nbthread 1"; echo "  maxconn 4096"
  echo "defaults"; echo "  mode http"; echo "  timeout connect 2s"; echo "  timeout client 60s"; echo "  timeout server 60s"; echo "  http-reuse always"
  echo "frontend fe"; echo "  bind 127.0.0.1:$((P + 1))"; echo "  default_backend be"
  echo "backend be"; echo "  balance roundrobin"
  for i in 0 1 2 3; do echo "  server s$i ${B[$i]} weight ${W[$i]}"; done
} > "$WORK/haproxy.cfg"
WEIGHTED=("${B[0]}=${W[0]}" "${B[1]}=${W[1]}" "${B[2]}=${W[2]}" "${B[3]}=${W[3]}")
bench_snapshot '"bench.test"' "${WEIGHTED[@]}" > "$WORK/snapshot.json"
bench_snapshot '"bench.test"' "${WEIGHTED[@]}" "${EXTRA[@]}" > "$WORK/snapshot1k.json"

# --- proxies (core 0) ---------------------------------------------------------
taskset -c 0 "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" & PIDS+=($!); NGINX_PID=$!
taskset -c 0 "$NGINX" -c "$WORK/nginx-log.conf" -p "$WORK" & PIDS+=($!); NGINXLOG_PID=$!
taskset -c 0 "$HAPROXY" -f "$WORK/haproxy.cfg" -db & PIDS+=($!); HAPROXY_PID=$!
GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id lean --config "$WORK/snapshot.json" \
  --listen 127.0.0.1:$((P + 2)) --admin 127.0.0.1:$((P + 12)) --access-log off --trace-sample 0 2>"$WORK/lean.log" & PIDS+=($!); LEAN_PID=$!
GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id net --config "$WORK/snapshot.json" \
  --listen 127.0.0.1:$((P + 6)) --admin 127.0.0.1:$((P + 16)) --access-log off --trace-sample 0 --front std \
  2>"$WORK/net.log" & PIDS+=($!); NET_PID=$!
GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id std --config "$WORK/snapshot.json" \
  --listen 127.0.0.1:$((P + 4)) --admin 127.0.0.1:$((P + 14)) --access-log off --trace-sample 0 --upstream-client std \
  2>"$WORK/std.log" & PIDS+=($!); STD_PID=$!
OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$((P + 30)) \
GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id full --config "$WORK/snapshot.json" \
  --listen 127.0.0.1:$((P + 3)) --admin 127.0.0.1:$((P + 13)) --access-log "$WORK/access.log" --access-log-buffer 65536 --trace-exporter otlp \
  --trace-sample 0.01 2>"$WORK/full.log" >/dev/null & PIDS+=($!); FULL_PID=$!
GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id k1 --config "$WORK/snapshot1k.json" \
  --listen 127.0.0.1:$((P + 5)) --admin 127.0.0.1:$((P + 15)) --access-log off --trace-sample 0 2>"$WORK/1k.log" & PIDS+=($!); K1_PID=$!
# The full configuration one feature at a time (not in the default NAMES): the
# lean-to-full step broken down. lbproxy-log: the access log alone;
# lbproxy-trace: 1 % sampling exported alone; lbproxy-trace0: the tracer
# with nothing sampled (what the 99 % unsampled requests pay).
GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id log --config "$WORK/snapshot.json" \
  --listen 127.0.0.1:$((P + 24)) --admin 127.0.0.1:$((P + 34)) --access-log "$WORK/access-log.log" --access-log-buffer 65536 \
  --trace-sample 0 2>"$WORK/log.log" >/dev/null & PIDS+=($!); LOG_PID=$!
for t in "trace 0.01 25" "trace0 0 26"; do
  set -- $t
  OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$((P + 30)) \
  GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id "$1" --config "$WORK/snapshot.json" \
    --listen 127.0.0.1:$((P + $3)) --admin 127.0.0.1:$((P + $3 + 10)) --access-log off --trace-exporter otlp \
    --trace-sample "$2" 2>"$WORK/$1.log" >/dev/null & PIDS+=($!)
  declare "${1^^}_PID=$!"
done
GOMAXPROCS=1 taskset -c 0 "$WORK/benchtool" floor -addr 127.0.0.1:$((P + 37)) \
  -backends "$(IFS=,; echo "${WEIGHTED[*]}")" 2>"$WORK/floor.log" & PIDS+=($!); FLOOR_PID=$!
GOMAXPROCS=1 taskset -c 0 "$WORK/benchtool" evfloor -addr 127.0.0.1:$((P + 38)) \
  -backends "$(IFS=,; echo "${WEIGHTED[*]}")" 2>"$WORK/evfloor.log" & PIDS+=($!); EVFLOOR_PID=$!
ALT_PID=0
ALTFULL_PID=0
ALT1K_PID=0
if [ -n "${ALT:-}" ]; then # another lbproxy build, lean and full flags: an A/B in one run
  GOMAXPROCS=1 taskset -c 0 "$ALT" --proxy-cluster BENCH --id alt --config "$WORK/snapshot.json" \
    --listen 127.0.0.1:$((P + 8)) --admin 127.0.0.1:$((P + 18)) --access-log off --trace-sample 0 2>"$WORK/alt.log" & PIDS+=($!); ALT_PID=$!
  OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$((P + 30)) \
  GOMAXPROCS=1 taskset -c 0 "$ALT" --proxy-cluster BENCH --id altfull --config "$WORK/snapshot.json" \
    --listen 127.0.0.1:$((P + 9)) --admin 127.0.0.1:$((P + 19)) --access-log "$WORK/access-alt.log" --access-log-buffer 65536 --trace-exporter otlp \
    --trace-sample 0.01 2>"$WORK/altfull.log" >/dev/null & PIDS+=($!); ALTFULL_PID=$!
  GOMAXPROCS=1 taskset -c 0 "$ALT" --proxy-cluster BENCH --id alt1k --config "$WORK/snapshot1k.json" \
    --listen 127.0.0.1:$((P + 31)) --admin 127.0.0.1:$((P + 32)) --access-log off --trace-sample 0 2>"$WORK/alt1k.log" & PIDS+=($!); ALT1K_PID=$!
fi

declare -A URL=([nginx]=http://127.0.0.1:$P/ [nginx-log]=http://127.0.0.1:$((P + 7))/ [haproxy]=http://127.0.0.1:$((P + 1))/ [lbproxy]=http://127.0.0.1:$((P + 2))/ [lbproxy-net]=http://127.0.0.1:$((P + 6))/
  [lbproxy-std]=http://127.0.0.1:$((P + 4))/ [lbproxy-full]=http://127.0.0.1:$((P + 3))/ [lbproxy-1k]=http://127.0.0.1:$((P + 5))/ [lbproxy-alt]=http://127.0.0.1:$((P + 8))/ [lbproxy-alt-full]=http://127.0.0.1:$((P + 9))/ [lbproxy-alt-1k]=http://127.0.0.1:$((P + 31))/
  [lbproxy-log]=http://127.0.0.1:$((P + 24))/ [lbproxy-trace]=http://127.0.0.1:$((P + 25))/ [lbproxy-trace0]=http://127.0.0.1:$((P + 26))/ [floor]=http://127.0.0.1:$((P + 37))/ [evfloor]=http://127.0.0.1:$((P + 38))/ [direct]=http://${B[0]}/)
declare -A PID=([nginx]=$NGINX_PID [nginx-log]=$NGINXLOG_PID [haproxy]=$HAPROXY_PID [lbproxy]=$LEAN_PID [lbproxy-net]=$NET_PID [lbproxy-std]=$STD_PID
  [lbproxy-full]=$FULL_PID [lbproxy-1k]=$K1_PID [lbproxy-alt]=$ALT_PID [lbproxy-alt-full]=$ALTFULL_PID [lbproxy-alt-1k]=$ALT1K_PID
  [lbproxy-log]=$LOG_PID [lbproxy-trace]=$TRACE_PID [lbproxy-trace0]=$TRACE0_PID [floor]=$FLOOR_PID [evfloor]=$EVFLOOR_PID [direct]=0)
NAMES=(${NAMES:-nginx nginx-log haproxy lbproxy lbproxy-net lbproxy-std lbproxy-full lbproxy-1k direct})
echo "load before: $(uptime)" >&2

for n in "${NAMES[@]}"; do
  for i in $(seq 50); do
    curl -fs -o /dev/null -H 'Host: bench.test' "${URL[$n]}" && break
    sleep 0.2  # waiting for a process to bind (no readiness hook for nginx/haproxy)
  done
done
# nginx forks a worker: measure the worker (the child of the master).
for n in nginx nginx-log; do
  w=$(pgrep -P "${PID[$n]}" | head -1 || true)
  [ -n "$w" ] && PID[$n]=$w
done

ticks() { # utime+stime of a process and its children threads, in clock ticks
  [ "$1" = 0 ] && { echo 0; return; }
  awk '{print $14+$15}' "/proc/$1/stat"
}
HZ=$(getconf CLK_TCK)
declare -A RPS CPU BCPU CPUF P50 P99
for r in $(seq "$ROUNDS"); do
  mapfile -t order < <(round_order "$r" "${NAMES[@]}")
  for n in "${order[@]}"; do
    [ "$WARMUP" = 0 ] || GOGC=off taskset -c 1 "$WORK/benchtool" load -url "${URL[$n]}" -conns 64 -duration "$WARMUP" >/dev/null
    b0=$(ticks "$BACKENDS_PID"); t0=$(ticks "${PID[$n]}")
    out=$(GOGC=off taskset -c 1 "$WORK/benchtool" load -url "${URL[$n]}" -conns 64 -duration "$DURATION")
    t1=$(ticks "${PID[$n]}"); b1=$(ticks "$BACKENDS_PID")
    reqs=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$out")
    rps=$(sed -E 's/.*rps=([0-9]+).*/\1/' <<<"$out")
    cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$reqs" 'BEGIN{ if (n>0) printf "%.1f", (b-a)/hz*1e6/n; else print "nan" }')
    bcpu=$(awk -v a="$b0" -v b="$b1" -v hz="$HZ" -v n="$reqs" 'BEGIN{ if (n>0) printf "%.1f", (b-a)/hz*1e6/n; else print "nan" }')
    t0=$(ticks "${PID[$n]}")
    fixed=$(GOGC=off taskset -c 1 "$WORK/benchtool" rate -url "${URL[$n]}" -rate "$CPU_RATE" -duration "$PHASE")
    t1=$(ticks "${PID[$n]}")
    freqs=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$fixed")
    cpuf=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v n="$freqs" 'BEGIN{ if (n>0) printf "%.1f", (b-a)/hz*1e6/n; else print "nan" }')
    lat=$(GOGC=off taskset -c 1 "$WORK/benchtool" rate -url "${URL[$n]}" -rate "$RATE" -duration "$PHASE")
    RPS[$n]+="$rps "; CPU[$n]+="$cpu "; BCPU[$n]+="$bcpu "; CPUF[$n]+="$cpuf "; P50[$n]+="$(sed -E 's/.*p50_ms=([0-9.]+).*/\1/' <<<"$lat") "
    P99[$n]+="$(sed -E 's/.*p99_ms=([0-9.]+).*/\1/' <<<"$lat") "
    echo "round $r $n: $out | cpu_us/req=$cpu backend_us/req=$bcpu | at $CPU_RATE/s: cpu_us/req=$cpuf | $lat" >&2
  done
done
printf "\n%-13s %10s %12s %8s %14s %8s %10s %10s %11s\n" proxy "req/s" "CPU µs/req" "÷nginx" "@$CPU_RATE/s µs" "÷nginx" "p50 ms" "p99 ms" "backend µs"
for n in "${NAMES[@]}"; do
  ratio=-; ratiof=-
  if [ -n "${CPU[nginx]:-}" ]; then # without the nginx row the ÷nginx columns print -
    ratio=$(rounds "${CPU[$n]}" "${CPU[nginx]}" | median); ratiof=$(rounds "${CPUF[$n]}" "${CPUF[nginx]}" | median)
  fi
  c=$(median <<<"${CPU[$n]}"); cf=$(median <<<"${CPUF[$n]}")
  [ "$n" = direct ] && { c="-"; ratio="-"; cf="-"; ratiof="-"; }
  printf "%-13s %10s %12s %8s %14s %8s %10s %10s %11s\n" "$n" "$(median <<<"${RPS[$n]}")" "$c" "$ratio" "$cf" "$ratiof" "$(median <<<"${P50[$n]}")" "$(median <<<"${P99[$n]}")" "$(median <<<"${BCPU[$n]}")"
done
if [ -n "${CPU[nginx]:-}" ]; then
  for n in "${NAMES[@]}"; do
    [ "$n" = nginx ] || [ "$n" = direct ] && continue
    echo "÷ nginx per round, $n: closed loop $(rounds "${CPU[$n]}" "${CPU[nginx]}")· at $CPU_RATE/s $(rounds "${CPUF[$n]}" "${CPUF[nginx]}")"
  done
fi
ratio() { # row $1 ÷ row $2, both run, the median of the per-round ratios; $3 says what the pair compares
  [[ " ${NAMES[*]} " == *" $1 "* && " ${NAMES[*]} " == *" $2 "* ]] || return 0
  echo "$1 ÷ $2 ($3): $(rounds "${CPU[$1]}" "${CPU[$2]}" | median) closed loop, $(rounds "${CPUF[$1]}" "${CPUF[$2]}" | median) at the fixed rate"
}
ratio lbproxy-full nginx-log "both with an access log"
ratio lbproxy floor "lbproxy's own work"
ratio floor nginx "a Go proxy's floor"
ratio evfloor floor "an own epoll loop instead of the runtime's poller"
ratio lbproxy-1k lbproxy "1 000 instances ÷ 4" # issue 20: ≤ +10 % at the fixed rate
ratio lbproxy-alt-1k lbproxy-alt "1 000 instances ÷ 4, ALT"
ratio lbproxy lbproxy-alt "this build ÷ ALT"
ratio lbproxy-full lbproxy-alt-full "this build ÷ ALT"
ratio lbproxy-1k lbproxy-alt-1k "this build ÷ ALT"
echo "load after: $(uptime)"
echo "(medians of $ROUNDS interleaved rounds, ÷ as medians of per-round ratios, each row after a $WARMUP unmeasured warm-up: $DURATION closed loop + $PHASE at $CPU_RATE req/s + $PHASE at $RATE req/s; proxies on core 0, load+backends on core 1)"
