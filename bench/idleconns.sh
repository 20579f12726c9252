#!/usr/bin/env bash
# bench/idleconns.sh — memory per idle keep-alive client connection (issue 23).
#
# For each count in CONNS, a fresh proxy gets that many keep-alive client
# connections (each sends one GET, reads the answer, then stays open and
# idle); benchtool idle prints the proxy's RSS per connection (/proc) and,
# for lbproxy, Go heap and stack per connection (/metrics after a forced
# collection, --pprof behind an admin token). Rows:
#   lbproxy       defaults (fasthttp front): plain HTTP/1.1
#   lbproxy-net   --front std (net/http): plain HTTP/1.1
#   lbproxy-tls   HTTP/1.1 over TLS (ECDSA P-256), ALPN http/1.1 (--tls-front std, the default)
#   lbproxy-tls-fast  the same on --tls-front fasthttp (parked while idle)
#   lbproxy-h2    HTTP/2 over TLS, ALPN h2: one GET, then no open stream
#   nginx, nginx-tls, nginx-h2  the same three on nginx, one worker, when
#                 nginx is installed (its worker's RSS)
# Loopback only; every phase is bounded (open + settle + measure). The fd
# limit is raised to the hard limit; a count that does not fit under it
# (client and proxy each hold one fd per connection) is skipped and said so.
#
# Usage: CONNS="10000 50000" bench/idleconns.sh   (PROFILES=DIR: lbproxy heap profiles there)
set -euo pipefail
CONNS=${CONNS:-10000 50000}
ROWS=${ROWS:-lbproxy lbproxy-net lbproxy-tls lbproxy-tls-fast lbproxy-h2 nginx nginx-tls nginx-h2}
RSS_SETTLE=${RSS_SETTLE:-20s} # then poll RSS until it stops falling, at most this long (0: off)
read -r -a LBFLAGS <<< "${LBFLAGS:-}" # more lbproxy flags for every lbproxy row, e.g. LBFLAGS="--gc-percent 100"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/sluice-idle.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
LIMIT=$(ulimit -n)

echo "building lbproxy and benchtool..." >&2
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=bench.test \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

"$WORK/benchtool" backends -addrs 127.0.0.1:29301 & PIDS+=($!)
cat > "$WORK/snapshot.json" <<JSON
{"meta":{"proxy_cluster":"BENCH","version":1,"created_at":"2025-01-01T00:00:00Z"},
 "products":{"bench":{"hosts":["bench.test"],"rules":[{"name":"all","cond":"default_t()","cluster":"be"}]}},
 "default_product":"bench",
 "clusters":{"be":{"subclusters":{"SC1":{"idc":"IDC1","instances":[{"addr":"127.0.0.1","port":29301,"weight":1}]}},
   "row":{"denominator":100,"weights":{"SC1":100}}}}}
JSON
NGINX=$(command -v nginx || true)

wait_up() { # $1: URL
  for _ in $(seq 100); do
    curl -fsk -o /dev/null -H 'Host: bench.test' "$1" && return 0
    sleep 0.1 # waiting for the process to bind
  done
  echo "$1 did not come up" >&2; return 1
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

for n in $CONNS; do
  if [ $((n + 200)) -gt "$LIMIT" ]; then
    echo "$n connections: skipped, the fd limit here is $LIMIT (hard limit; raise it as root to measure)"
    continue
  fi
  for row in $ROWS; do
    case $row in
      lbproxy|lbproxy-net|lbproxy-tls|lbproxy-tls-fast|lbproxy-h2)
        extra=(); url=http://127.0.0.1:28383/; addr=127.0.0.1:28383; tls=()
        [ "$row" = lbproxy-net ] && extra=(--front std)
        case $row in lbproxy-tls*|lbproxy-h2)
          extra=(--listen-tls 127.0.0.1:28384 --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem")
          url=https://127.0.0.1:28384/; addr=127.0.0.1:28384; tls=(-tls) ;; esac
        [ "$row" = lbproxy-tls-fast ] && extra+=(--tls-front fasthttp)
        [ "$row" = lbproxy-h2 ] && tls=(-h2)
        GOMAXPROCS=1 "$WORK/lbproxy" --proxy-cluster BENCH --id idle --config "$WORK/snapshot.json" \
          --listen 127.0.0.1:28383 --admin 127.0.0.1:29383 --admin-token bench --pprof \
          --access-log off --trace-sample 0 "${extra[@]}" "${LBFLAGS[@]}" 2>"$WORK/$row.log" & pid=$!; PIDS+=($pid)
        wait_up "$url"
        prof=(); [ -n "${PROFILES:-}" ] && prof=(-heap-profile "$PROFILES/$row-$n.pprof")
        "$WORK/benchtool" idle -label "$row" -addr "$addr" -pid "$pid" -conns "$n" -admin 127.0.0.1:29383 -token bench -rss-settle "$RSS_SETTLE" "${tls[@]}" "${prof[@]}"
        stop "$pid" ;;
      nginx|nginx-tls|nginx-h2)
        [ -n "$NGINX" ] || { echo "$row: not installed, skipped"; continue; }
        listen="listen 127.0.0.1:28381;"; url=http://127.0.0.1:28381/; tls=()
        case $row in nginx-tls) listen="listen 127.0.0.1:28381 ssl;"; url=https://127.0.0.1:28381/; tls=(-tls) ;;
          nginx-h2) listen="listen 127.0.0.1:28381 ssl http2;"; url=https://127.0.0.1:28381/; tls=(-h2) ;; esac
        {
          echo "worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/nginx.err; worker_rlimit_nofile $LIMIT;"
          echo "events { worker_connections $((n + 100)); }"
          echo "http { access_log off; keepalive_requests 1000000; keepalive_timeout 90s;"
          echo " client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK; uwsgi_temp_path $WORK; scgi_temp_path $WORK;"
          echo " upstream be { server 127.0.0.1:29301; keepalive 64; }"
          echo " ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem;"
          echo " server { $listen location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }"
        } > "$WORK/nginx.conf"
        "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" & pid=$!; PIDS+=($pid)
        wait_up "$url"
        worker=$(pgrep -P "$pid" | head -1)
        "$WORK/benchtool" idle -label "$row" -addr 127.0.0.1:28381 -pid "$worker" -conns "$n" -rss-settle "$RSS_SETTLE" "${tls[@]}"
        stop "$pid" ;;
    esac
  done
done
