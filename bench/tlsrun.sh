#!/usr/bin/env bash
# bench/tlsrun.sh — CPU per request over TLS, lbproxy side by side with
# nginx (issue 20): HTTP/1.1 keep-alive (wrk, 64 connections) and HTTP/2
# (benchtool load -h2: 160 concurrent requests multiplexed by Go's client).
# Each proxy has one core (taskset -c 0, GOMAXPROCS=1, one nginx worker);
# load and backends run on the other. ECDSA P-256 certificate, 4 backends.
# CPU µs/req = the proxy's utime+stime over the phase ÷ requests answered.
# Rows: nginx · lbproxy (--tls-front std, the default) · lbproxy-fast
# (--tls-front fasthttp). Rounds interleave the rows.
#
# Usage: ROUNDS=3 DURATION=8s bench/tlsrun.sh   (KEEP=1 keeps the work directory and its logs)
set -euo pipefail
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/sluice-tls.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT
fail_logs() { tail -n 5 "$WORK"/*.log "$WORK"/nginx.err 2>/dev/null >&2 || true; }
trap fail_logs ERR
for t in nginx wrk; do command -v "$t" >/dev/null || { echo "tlsrun.sh needs $t on the PATH" >&2; exit 2; }; done

echo "building lbproxy and benchtool..." >&2
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=bench.test \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

B=(127.0.0.1:29401 127.0.0.1:29402 127.0.0.1:29403 127.0.0.1:29404)
taskset -c 1 "$WORK/benchtool" backends -addrs "$(IFS=,; echo "${B[*]}")" & PIDS+=($!)
{
  echo "worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/nginx.err;"
  echo "events { worker_connections 4096; }"
  echo "http { access_log off; keepalive_requests 1000000;"
  echo " client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK; uwsgi_temp_path $WORK; scgi_temp_path $WORK;"
  echo " ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem;"
  echo " upstream be {"; for b in "${B[@]}"; do echo "  server $b;"; done; echo "  keepalive 64; }"
  echo " server { listen 127.0.0.1:28481 ssl http2; location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }"
} > "$WORK/nginx.conf"
INST=""
for b in "${B[@]}"; do INST+="{\"addr\":\"${b%:*}\",\"port\":${b#*:},\"weight\":1},"; done
cat > "$WORK/snapshot.json" <<JSON
{"meta":{"proxy_cluster":"BENCH","version":1,"created_at":"2025-01-01T00:00:00Z"},
 "products":{"bench":{"hosts":["bench.test","127.0.0.1"],"rules":[{"name":"all","cond":"default_t()","cluster":"be"}]}},
 "default_product":"bench",
 "clusters":{"be":{"subclusters":{"SC1":{"idc":"IDC1","instances":[${INST%,}]}},
   "row":{"denominator":100,"weights":{"SC1":100}}}}}
JSON
taskset -c 0 nginx -c "$WORK/nginx.conf" -p "$WORK" 2>/dev/null & PIDS+=($!); NGINX_PID=$!
declare -A URL=([nginx]=https://127.0.0.1:28481/ [lbproxy]=https://127.0.0.1:28482/ [lbproxy-fast]=https://127.0.0.1:28483/)
declare -A PID
i=0
for row in lbproxy lbproxy-fast; do
  i=$((i + 1)); front=std; [ "$row" = lbproxy-fast ] && front=fasthttp
  GOMAXPROCS=1 taskset -c 0 "$WORK/lbproxy" --proxy-cluster BENCH --id "$row" --config "$WORK/snapshot.json" \
    --listen 127.0.0.1:$((28490 + i)) --admin 127.0.0.1:$((29490 + i)) --access-log off --trace-sample 0 \
    --listen-tls "$(basename "${URL[$row]}")" --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --tls-front "$front" \
    2>"$WORK/$row.log" & PIDS+=($!); PID[$row]=$!
done
for row in nginx lbproxy lbproxy-fast; do
  for _ in $(seq 100); do
    curl -fsk -o /dev/null -H 'Host: bench.test' "${URL[$row]}" && break
    sleep 0.1 # waiting for the process to bind
  done
done
PID[nginx]=$(pgrep -P "$NGINX_PID" | head -1)
echo "pids: nginx ${PID[nginx]} lbproxy ${PID[lbproxy]} lbproxy-fast ${PID[lbproxy-fast]}" >&2
echo "load before: $(uptime)" >&2
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
per() { awk -v a="$1" -v b="$2" -v hz="$HZ" -v n="$3" 'BEGIN{ if (n>0) printf "%.1f", (b-a)/hz*1e6/n; else print "nan" }'; }
declare -A H1 H2 R1 R2
for r in $(seq "$ROUNDS"); do
  for row in nginx lbproxy lbproxy-fast; do
    t0=$(ticks "${PID[$row]}")
    out=$(taskset -c 1 wrk -t1 -c64 -d"$DURATION" -H 'Host: bench.test' "${URL[$row]}")
    t1=$(ticks "${PID[$row]}")
    n=$(sed -nE 's/^ *([0-9]+) requests in.*/\1/p' <<<"$out")
    H1[$row]+="$(per "$t0" "$t1" "$n") "; R1[$row]+="$(sed -nE 's/^Requests\/sec: *([0-9.]+).*/\1/p' <<<"$out") "
    t0=$(ticks "${PID[$row]}")
    out=$(GOGC=off taskset -c 1 "$WORK/benchtool" load -h2 -url "${URL[$row]}" -conns 160 -duration "$DURATION")
    t1=$(ticks "${PID[$row]}")
    n=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$out")
    H2[$row]+="$(per "$t0" "$t1" "$n") "; R2[$row]+="$(sed -E 's/.*rps=([0-9]+).*/\1/' <<<"$out") "
  done
done
echo "load after: $(uptime)" >&2
med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
n1=$(med <<<"${H1[nginx]}"); n2=$(med <<<"${H2[nginx]}")
printf '| row | h1 req/s | h1 CPU µs/req | ÷ nginx | h2 req/s | h2 CPU µs/req | ÷ nginx |\n|---|---|---|---|---|---|---|\n'
for row in nginx lbproxy lbproxy-fast; do
  c1=$(med <<<"${H1[$row]}"); c2=$(med <<<"${H2[$row]}")
  printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$row" "$(med <<<"${R1[$row]}")" "$c1" "$(awk -v a="$c1" -v b="$n1" 'BEGIN{printf "%.2f", a/b}')" \
    "$(med <<<"${R2[$row]}")" "$c2" "$(awk -v a="$c2" -v b="$n2" 'BEGIN{printf "%.2f", a/b}')"
done
for row in nginx lbproxy lbproxy-fast; do echo "per round $row: h1 ${H1[$row]}· h2 ${H2[$row]}"; done
