#!/usr/bin/env bash
# bench/tlsrun.sh — CPU per request over TLS, lbproxy side by side with
# nginx (issue 20), three phases per row and round:
#   h1  HTTP/1.1 keep-alive: wrk -t1 -c64
#   h2  HTTP/2: h2load -c16 -m10 (160 concurrent streams on 16 connections);
#       without h2load, benchtool load -h2 (160 requests multiplexed by Go's client)
#   hs  a new TLS connection per request, as wrk makes them: wrk -t1 -c16
#       -H 'Connection: close' — wrk (OpenSSL) RESUMES its sessions where it can,
#       HS_DURATION long
#   hsf a new TLS connection per request with a FULL handshake: benchtool load
#       -newconn -conns 16 (Go's client, TLS 1.3, X25519, no session cache: nothing resumed), HS_DURATION long
# Each proxy has one core (taskset -c 0, GOMAXPROCS=1, one nginx worker);
# load and backends run on the other. ECDSA P-256 certificate, 4 backends.
# CPU µs/req = the proxy's utime+stime over the phase ÷ requests answered
# (/proc/PID/stat of the pinned process only: nginx's one worker, every thread
# of lbproxy; the total is the scheduler's exact run time, in 10 ms units).
# Order (robust on a shared machine, whose load moves within seconds): each
# row first gets one unmeasured WARMUP-long h1 (and h2) phase; then every round
# runs phase by phase, the rows of a phase back to back, in the listed order in
# odd rounds and reversed in even ones (nginx first, then last: a load drift
# falls on both sides of it). "÷ nginx" is the median of the per-round ratios
# (each row against nginx's phase of the same round, seconds apart), not a
# ratio of medians; the per-round ratios are printed under the table.
# Rows: nginx · lbproxy (--tls-front std) · lbproxy-fast (--tls-front
# fasthttp); ALT=path/to/lbproxy adds lbproxy-alt, that binary with
# --tls-front fasthttp and ALT_FLAGS (an A/B of two builds in one run).
# Rounds interleave the rows. Ports: a free block (benchtool ports) or PORT_BASE.
# Cipher suites, like with like: Go's crypto/tls picks TLS_AES_128_GCM_SHA256
# (AES-NI here) whatever wrk and h2load (OpenSSL) prefer; nginx follows the
# client's order and so picked TLS_AES_256_GCM_SHA384 for them, until
# NGINX_TLS13_CIPHERS (default TLS_AES_128_GCM_SHA256, "" for OpenSSL's
# default) pinned it (ssl_conf_command Ciphersuites).
#
# PHASES (default "h1 h2 hs hsf") runs only those phases (the others' columns stay empty).
# CONCURRENT=1: the h1 phase of all rows runs at the same time (one wrk per
# row, the proxies sharing core 0): every row under the same background load,
# at the price of their sharing the core and its caches with one another.
# LBPROXY=path: that lbproxy build instead of building this tree's.
# BODY=N: the backends' answers are N bytes (default 100).
# STD=0 leaves out the lbproxy --tls-front std row. WARMUP (default 2s; 0: none).
# SYSCALLS=1: after the rounds, one h1 phase per row under perf stat (syscall
# tracepoints: exact counts, without strace's slowdown) prints system calls per
# request, and context switches and page faults per request; needs perf and
# tracefs.
# CALLGRIND=1: instead of the rounds, every row runs under valgrind's callgrind
# (GODEBUG=asyncpreemptoff=1 for Go; nginx with master_process off) and the
# script prints each proxy's instructions per HTTP/1.1 keep-alive request: the
# count over h2load --h1 -c64 -n CG_N (default 10000) minus the count over
# -n 2000, divided by the difference (the 64 handshakes and the start cancel
# out). Exact counts, untouched by the load of the machine. CG_OPTS adds
# valgrind flags: "--cache-sim=yes" (simulated L1 and last-level misses),
# "--branch-sim=yes" (mispredicted branches). Needs valgrind and h2load.
# The HTTP/2 servers A/B (issues 20, 23): ALT=<this build's lbproxy> ALT_FLAGS="--h2-server xnet" PHASES=h2
#
# Usage: ROUNDS=3 DURATION=8s HS_DURATION=5s bench/tlsrun.sh   (KEEP=1 keeps the work directory and its logs)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-2s}
DURATION=${DURATION:-8s}
HS_DURATION=${HS_DURATION:-5s}
PHASES=" ${PHASES:-h1 h2 hs hsf} "
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/snapshot.sh
. "$ROOT/bench/snapshot.sh"
# shellcheck source=bench/rounds.sh
. "$ROOT/bench/rounds.sh"
WORK=$(mktemp -d /tmp/sluice-tls.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT
fail_logs() { tail -n 5 "$WORK"/*.log "$WORK"/nginx.err 2>/dev/null >&2 || true; }
trap fail_logs ERR
for t in nginx wrk; do command -v "$t" >/dev/null || { echo "tlsrun.sh needs $t on the PATH" >&2; exit 2; }; done

if [ -n "${LBPROXY:-}" ]; then # a build made beforehand (the lock is not held while it compiles)
  cp "$LBPROXY" "$WORK/lbproxy"
else
  echo "building lbproxy..." >&2
  (cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
fi
echo "building benchtool..." >&2
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=bench.test \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

# P+0..P+3 proxies, P+10..P+13 their plain and P+20..P+23 admin listeners, P+30..P+33 backends
P=${PORT_BASE:-$("$WORK/benchtool" ports -n 40)}
B=(127.0.0.1:$((P + 30)) 127.0.0.1:$((P + 31)) 127.0.0.1:$((P + 32)) 127.0.0.1:$((P + 33)))
taskset -c 1 "$WORK/benchtool" backends -body "${BODY:-100}" -addrs "$(IFS=,; echo "${B[*]}")" & PIDS+=($!)
{
  echo "worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/nginx.err;"
  echo "events { worker_connections 4096; }"
  echo "http { access_log off; keepalive_requests 1000000;"
  echo " client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK; uwsgi_temp_path $WORK; scgi_temp_path $WORK;"
  # TLS 1.3 as lbproxy (nginx 1.22's default is TLS 1.2 and below)
  echo " ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem; ssl_protocols TLSv1.2 TLSv1.3;"
  [ -n "${NGINX_TLS13_CIPHERS-TLS_AES_128_GCM_SHA256}" ] && echo " ssl_conf_command Ciphersuites ${NGINX_TLS13_CIPHERS-TLS_AES_128_GCM_SHA256};"
  echo " upstream be {"; for b in "${B[@]}"; do echo "  server $b;"; done; echo "  keepalive 64; }"
  echo " server { listen 127.0.0.1:$P ssl http2; location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }"
} > "$WORK/nginx.conf"
bench_snapshot '"bench.test","127.0.0.1"' "${B[@]}" > "$WORK/snapshot.json"
RUN=(taskset -c 0) NGINX_G=()
if [ -n "${CALLGRIND:-}" ]; then
  # shellcheck disable=SC2206 # CG_OPTS: words
  RUN=(taskset -c 0 env GODEBUG=asyncpreemptoff=1 valgrind -q --tool=callgrind --callgrind-out-file="$WORK/cg.%p" ${CG_OPTS:-})
  NGINX_G=(-g "master_process off;") # the worker is the process valgrind counts
fi
"${RUN[@]}" nginx -c "$WORK/nginx.conf" -p "$WORK" "${NGINX_G[@]}" 2>/dev/null & PIDS+=($!); NGINX_PID=$!
declare -A URL=([nginx]=https://127.0.0.1:$P/ [lbproxy]=https://127.0.0.1:$((P + 1))/ [lbproxy-fast]=https://127.0.0.1:$((P + 2))/
  [lbproxy-alt]=https://127.0.0.1:$((P + 3))/)
declare -A PID
ROWS=(nginx lbproxy lbproxy-fast)
[ "${STD:-1}" = 0 ] && ROWS=(nginx lbproxy-fast)
[ -n "${ALT:-}" ] && ROWS+=(lbproxy-alt)
i=0
for row in "${ROWS[@]:1}"; do
  i=$((i + 1)); front=std bin=$WORK/lbproxy extra=()
  [ "$row" != lbproxy ] && front=fasthttp
  # shellcheck disable=SC2206 # ALT_FLAGS: words
  [ "$row" = lbproxy-alt ] && { bin=$ALT; extra=(${ALT_FLAGS:-}); }
  GOMAXPROCS=1 "${RUN[@]}" "$bin" --proxy-cluster BENCH --id "$row" --config "$WORK/snapshot.json" \
    --listen 127.0.0.1:$((P + 10 + i)) --admin 127.0.0.1:$((P + 20 + i)) --access-log off --trace-sample 0 \
    --listen-tls "$(basename "${URL[$row]}")" --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --tls-front "$front" \
    "${extra[@]}" 2>"$WORK/$row.log" & PIDS+=($!); PID[$row]=$!
done
tries=100; [ -n "${CALLGRIND:-}" ] && tries=600 # valgrind starts slowly
for row in "${ROWS[@]}"; do
  for _ in $(seq "$tries"); do
    curl -fsk -o /dev/null -H 'Host: bench.test' "${URL[$row]}" && break
    sleep 0.1 # waiting for the process to bind
  done
done
PID[nginx]=$NGINX_PID # CALLGRIND: no master process
[ -n "${CALLGRIND:-}" ] || PID[nginx]=$(pgrep -P "$NGINX_PID" | head -1)
for row in "${ROWS[@]}"; do echo "pid $row ${PID[$row]}" >&2; done
H2LOAD=$(command -v h2load || true)
echo "HTTP/2 load: ${H2LOAD:-benchtool load -h2 (no h2load)}" >&2
if [ -n "${CALLGRIND:-}" ]; then
  [ -n "$H2LOAD" ] || { echo "CALLGRIND=1 needs h2load" >&2; exit 2; }
  cgcount() { # $1: row, $2: requests; prints the row's callgrind totals over them, counted from zero
    local f dumps out
    callgrind_control -z "${PID[$1]}" >/dev/null 2>&1
    out=$("$H2LOAD" --h1 -n "$2" -c64 "${URL[$1]}")
    grep -q " $2 succeeded" <<<"$out" || echo "$1: h2load -n $2: $(grep '^requests:' <<<"$out")" >&2
    dumps=$(ls "$WORK/cg.${PID[$1]}".* 2>/dev/null | wc -l)
    callgrind_control -d "${PID[$1]}" >/dev/null 2>&1
    for _ in $(seq 100); do [ "$(ls "$WORK/cg.${PID[$1]}".* 2>/dev/null | wc -l)" -gt "$dumps" ] && break; sleep 0.1; done
    f=$(ls -t "$WORK/cg.${PID[$1]}".* | head -1)
    sleep 0.5 # the dump written whole
    sed -nE 's/^summary: //p' "$f"
  }
  CG_N=${CG_N:-10000}
  echo "callgrind, per HTTP/1.1 keep-alive request (h2load --h1 -c64: -n $CG_N minus -n 2000, ÷ $((CG_N - 2000))):"
  for row in "${ROWS[@]}"; do
    a=$(cgcount "$row" 2000); b=$(cgcount "$row" "$CG_N")
    ev=$(sed -nE 's/^events: //p' "$(ls -t "$WORK/cg.${PID[$row]}".* | head -1)")
    awk -v row="$row" -v ev="$ev" -v a="$a" -v b="$b" -v d=$((CG_N - 2000)) 'BEGIN{ n = split(ev, e, " "); split(a, x, " "); split(b, y, " ")
      printf "%s:", row; for (k = 1; k <= n; k++) { v = sprintf("%.0f", (y[k] - x[k]) / d); printf " %s %s", e[k], v == "-0" ? 0 : v }; print "" }'
  done
  exit 0
fi
echo "load before: $(uptime)" >&2
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
per() { awk -v a="$1" -v b="$2" -v hz="$HZ" -v n="$3" 'BEGIN{ if (n>0) printf "%.1f", (b-a)/hz*1e6/n; else print "nan" }'; }
wrkrun() { # $1: row, $2: duration, then wrk's flags; sets n (requests answered) and rps
  local row=$1 d=$2 out; shift 2
  out=$(taskset -c 1 wrk -t1 -d"$d" -H 'Host: bench.test' "$@" "${URL[$row]}")
  n=$(sed -nE 's/^ *([0-9]+) requests in.*/\1/p' <<<"$out")
  rps=$(sed -nE 's/^Requests\/sec: *([0-9.]+).*/\1/p' <<<"$out")
  if grep -q 'Non-2xx\|Socket errors' <<<"$out"; then echo "$row: $(grep 'Non-2xx\|Socket errors' <<<"$out")" >&2; fi
}
h2run() { # $1: row; sets n and rps
  local out
  if [ -n "$H2LOAD" ]; then
    out=$(taskset -c 1 "$H2LOAD" -t1 -c16 -m10 -D "${DURATION%s}" "${URL[$1]}" 2>&1)
    n=$(sed -nE 's/^requests: .* ([0-9]+) succeeded.*/\1/p' <<<"$out")
    rps=$(sed -nE 's/^finished in [0-9.]+s, ([0-9.]+) req\/s.*/\1/p' <<<"$out")
  else
    out=$(GOGC=off taskset -c 1 "$WORK/benchtool" load -h2 -url "${URL[$1]}" -conns 160 -duration "$DURATION")
    n=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$out")
    rps=$(sed -E 's/.*rps=([0-9]+).*/\1/' <<<"$out")
  fi
}
declare -A H1=() H2=() HS=() HF=() R1=() R2=() RS=() RF=()
measure() { # $1: phase, $2: row; appends the row's CPU µs per request (connection) and rate of this round
  local ph=$1 row=$2 t0 t1 out
  t0=$(ticks "${PID[$row]}")
  case $ph in
    h1) wrkrun "$row" "$DURATION" -c64 ;;
    h2) h2run "$row" ;;
    hs) wrkrun "$row" "$HS_DURATION" -c16 -H 'Connection: close' ;;
    hsf)
      out=$(GOGC=off taskset -c 1 "$WORK/benchtool" load -newconn -url "${URL[$row]}" -conns 16 -duration "$HS_DURATION")
      n=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$out"); rps=$(sed -E 's/.*rps=([0-9]+).*/\1/' <<<"$out") ;;
  esac
  t1=$(ticks "${PID[$row]}")
  case $ph in
    h1) H1[$row]+="$(per "$t0" "$t1" "$n") "; R1[$row]+="$rps " ;;
    h2) H2[$row]+="$(per "$t0" "$t1" "$n") "; R2[$row]+="$rps " ;;
    hs) HS[$row]+="$(per "$t0" "$t1" "$n") "; RS[$row]+="$rps " ;;
    hsf) HF[$row]+="$(per "$t0" "$t1" "$n") "; RF[$row]+="$rps " ;;
  esac
}
measure_together() { # the h1 phase of every row at once (CONCURRENT=1): each proxy sees the same moment of the machine
  local row w=(); declare -A T0=()
  for row in "${ROWS[@]}"; do T0[$row]=$(ticks "${PID[$row]}"); done
  for row in "${ROWS[@]}"; do
    taskset -c 1 wrk -t1 -d"$DURATION" -H 'Host: bench.test' -c64 "${URL[$row]}" >"$WORK/wrk.$row" & w+=($!)
  done
  wait "${w[@]}"
  for row in "${ROWS[@]}"; do
    n=$(sed -nE 's/^ *([0-9]+) requests in.*/\1/p' "$WORK/wrk.$row"); rps=$(sed -nE 's/^Requests\/sec: *([0-9.]+).*/\1/p' "$WORK/wrk.$row")
    H1[$row]+="$(per "${T0[$row]}" "$(ticks "${PID[$row]}")" "$n") "; R1[$row]+="$rps "
  done
}
if [ "${WARMUP%s}" != 0 ]; then
  for row in "${ROWS[@]}"; do
    [[ $PHASES == *" h1 "* ]] && wrkrun "$row" "$WARMUP" -c64
    [[ $PHASES == *" h2 "* ]] && DURATION=$WARMUP h2run "$row"
  done
fi
for r in $(seq "$ROUNDS"); do
  mapfile -t order < <(round_order "$r" "${ROWS[@]}")
  for ph in h1 h2 hs hsf; do
    [[ $PHASES == *" $ph "* ]] || continue
    if [ "$ph" = h1 ] && [ -n "${CONCURRENT:-}" ]; then measure_together; continue; fi
    for row in "${order[@]}"; do measure "$ph" "$row"; done
  done
done
echo "load after: $(uptime)" >&2
declare -A Q1=() Q2=() QS=() QF=()
printf '| row | h1 req/s | h1 µs/req | ÷ nginx | h2 req/s | h2 µs/req | ÷ nginx | resumed conn/s | µs/conn | ÷ nginx | full-handshake conn/s | µs/conn | ÷ nginx |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
for row in "${ROWS[@]}"; do
  Q1[$row]=$(rounds "${H1[$row]:-}" "${H1[nginx]:-}"); Q2[$row]=$(rounds "${H2[$row]:-}" "${H2[nginx]:-}")
  QS[$row]=$(rounds "${HS[$row]:-}" "${HS[nginx]:-}"); QF[$row]=$(rounds "${HF[$row]:-}" "${HF[nginx]:-}")
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$row" \
    "$(median <<<"${R1[$row]:-}")" "$(median <<<"${H1[$row]:-}")" "$(median <<<"${Q1[$row]}")" \
    "$(median <<<"${R2[$row]:-}")" "$(median <<<"${H2[$row]:-}")" "$(median <<<"${Q2[$row]}")" \
    "$(median <<<"${RS[$row]:-}")" "$(median <<<"${HS[$row]:-}")" "$(median <<<"${QS[$row]}")" \
    "$(median <<<"${RF[$row]:-}")" "$(median <<<"${HF[$row]:-}")" "$(median <<<"${QF[$row]}")"
done
for row in "${ROWS[@]}"; do echo "per round $row: h1 ${H1[$row]:-}· h2 ${H2[$row]:-}· resumed ${HS[$row]:-}· full ${HF[$row]:-}"; done
for row in "${ROWS[@]:1}"; do echo "÷ nginx per round $row: h1 ${Q1[$row]}· h2 ${Q2[$row]}· resumed ${QS[$row]}· full ${QF[$row]}"; done
if [ -n "${SYSCALLS:-}" ]; then
  SC=(read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait epoll_ctl getsockopt setsockopt futex nanosleep)
  EV=$(printf 'syscalls:sys_enter_%s,' "${SC[@]}")raw_syscalls:sys_enter,context-switches,page-faults
  echo "system calls per request, h1 (wrk -c64, $DURATION, perf stat):"
  for row in "${ROWS[@]}"; do
    # perf runs the load itself: it counts from when its counters are on (attaching them can take
    # seconds on a loaded machine: a fixed sleep before wrk missed up to half its requests) to wrk's end
    out=$(perf stat -x, -e "$EV" -p "${PID[$row]}" -o "$WORK/sys.$row" -- taskset -c 1 wrk -t1 -d"$DURATION" -H 'Host: bench.test' -c64 "${URL[$row]}")
    n=$(sed -nE 's/^ *([0-9]+) requests in.*/\1/p' <<<"$out")
    awk -F, -v n="$n" -v row="$row" 'BEGIN{ printf "%s:", row } $1 ~ /^[0-9]+$/ && $1 > 0 { e = $3; sub("syscalls:sys_enter_", "", e); sub("raw_syscalls:sys_enter", "all", e); printf " %s %.2f", e, $1 / n } END{ print "" }' "$WORK/sys.$row"
  done
fi
