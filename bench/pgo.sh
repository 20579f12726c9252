#!/usr/bin/env bash
# bench/pgo.sh — regenerate proxy/cmd/lbproxy/default.pgo, the CPU profile
# `go build` uses for lbproxy's profile-guided optimization (-pgo=auto: a
# default.pgo beside the main package). The profile is of lbproxy serving
# the request mix a front door sees: plain HTTP/1.1 keep-alive (the fasthttp
# front and the fast upstream client), HTTP/1.1 over TLS and HTTP/2 over TLS,
# each for PHASE (default 10s), to 4 loopback backends, sampled through the
# admin API's /debug/pprof/profile over the three phases. Built without PGO
# (-pgo=off), so the profile describes the plain build's hot paths.
#
# Needs h2load (nghttp2-client) and openssl. Usage: PHASE=10s bench/pgo.sh
set -euo pipefail
PHASE=${PHASE:-10s}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/snapshot.sh
. "$ROOT/bench/snapshot.sh"
WORK=$(mktemp -d /tmp/sluice-pgo.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
for t in h2load openssl curl; do command -v "$t" >/dev/null || { echo "pgo.sh needs $t on the PATH" >&2; exit 2; }; done

echo "building lbproxy (-pgo=off) and benchtool..." >&2
(cd "$ROOT" && CGO_ENABLED=0 go build -pgo=off -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=bench.test \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

# P+0 plain, P+1 TLS, P+2 admin, P+10..P+13 backends
P=${PORT_BASE:-$("$WORK/benchtool" ports -n 20)}
B=(127.0.0.1:$((P + 10)) 127.0.0.1:$((P + 11)) 127.0.0.1:$((P + 12)) 127.0.0.1:$((P + 13)))
"$WORK/benchtool" backends -addrs "$(IFS=,; echo "${B[*]}")" & PIDS+=($!)
bench_snapshot '"bench.test","127.0.0.1"' "${B[@]}" > "$WORK/snapshot.json"
GOMAXPROCS=1 "$WORK/lbproxy" --proxy-cluster BENCH --id pgo --config "$WORK/snapshot.json" \
  --listen 127.0.0.1:$P --listen-tls 127.0.0.1:$((P + 1)) --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" \
  --admin 127.0.0.1:$((P + 2)) --pprof --access-log off --trace-sample 0 2>"$WORK/lbproxy.log" & PIDS+=($!)
for _ in $(seq 100); do
  curl -fs -o /dev/null -H 'Host: bench.test' "http://127.0.0.1:$P/" && break
  sleep 0.1 # waiting for the process to bind
done

secs() { local d=$1; echo "${d%s}"; }
TOTAL=$(( 3 * $(secs "$PHASE") + 2 ))
curl -fs -o "$WORK/cpu.pprof" "http://127.0.0.1:$((P + 2))/debug/pprof/profile?seconds=$TOTAL" & CURL=$!
GOGC=off "$WORK/benchtool" load -url "http://127.0.0.1:$P/" -conns 64 -duration "$PHASE" >&2
h2load --h1 -c64 -D "$(secs "$PHASE")" "https://127.0.0.1:$((P + 1))/" | grep -E '^(requests|finished in):' >&2
h2load -c16 -m10 -D "$(secs "$PHASE")" "https://127.0.0.1:$((P + 1))/" | grep -E '^(requests|finished in):' >&2
wait "$CURL"
cp "$WORK/cpu.pprof" "$ROOT/proxy/cmd/lbproxy/default.pgo"
echo "wrote proxy/cmd/lbproxy/default.pgo ($(wc -c < "$ROOT/proxy/cmd/lbproxy/default.pgo") bytes)" >&2
