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
#   lbproxy-tls   HTTP/1.1 over TLS (ECDSA P-256), ALPN http/1.1 on --tls-front std (net/http)
#   lbproxy-tls-fast  the same on --tls-front fasthttp (the default; parked while idle)
#   lbproxy-h2    HTTP/2 over TLS, ALPN h2: one GET, then no open stream
#   lbproxy-h2-sluice  the same with --h2-server sluice (our HTTP/2 server)
#   nginx, nginx-tls, nginx-h2  the same three on nginx, one worker, when
#                 nginx is installed (its worker's RSS)
# Then, for each count in UPCONNS, idle upstream (pool) connections
# (benchtool idleup: that many requests held at the backend at once, then
# the client connections closed, the upstream ones left idle in the pool):
#   lbproxy-up      the fast upstream client (default)
#   lbproxy-up-std  --upstream-client std (http.Transport)
#   nginx-up        nginx's upstream keepalive cache
# After each measurement RSS is polled for RSS_SETTLE (default 20s) and its
# low printed too (rss_settled: freed heap returned to the OS meanwhile, e.g.
# lbproxy's --memory-release-interval, default 10s).
# Loopback only; every phase is bounded (open + settle + measure). The fd
# limit is raised to the hard limit. A count that does not fit under it
# (client and proxy each hold one fd per connection) runs in docker when
# docker is there and can give its containers that limit (--ulimit; proxy
# and client each in a FROM scratch container, --network host, RSS read from
# the host's /proc); otherwise it is skipped, and the output says which.
# DOCKER=1 runs every count in docker.
#
# Ports: a block of 6 consecutive loopback ports free at start (benchtool
# ports, below the ephemeral range), or PORT_BASE=N to choose it: P the
# backends, P+1 idleup's backend, P+2 lbproxy's plain listener, P+3 its TLS
# listener, P+4 its admin listener, P+5 nginx.
#
# Usage: CONNS="10000 50000" UPCONNS=5000 bench/idleconns.sh   (PROFILES=DIR: lbproxy heap profiles there;
# an empty CONNS or UPCONNS skips that part)
set -euo pipefail
CONNS=${CONNS-10000 50000}
ROWS=${ROWS-lbproxy lbproxy-net lbproxy-tls lbproxy-tls-fast lbproxy-h2 lbproxy-h2-sluice nginx nginx-tls nginx-h2}
UPCONNS=${UPCONNS-5000}
UPROWS=${UPROWS-lbproxy-up lbproxy-up-std nginx-up}
RSS_SETTLE=${RSS_SETTLE:-20s} # then poll RSS until it stops falling, at most this long (0: off)
read -r -a LBFLAGS <<< "${LBFLAGS:-}" # more lbproxy flags for every lbproxy row, e.g. LBFLAGS="--gc-percent 100"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/snapshot.sh
. "$ROOT/bench/snapshot.sh"
WORK=$(mktemp -d /tmp/sluice-idle.XXXXXX)
PIDS=()
CONTAINERS=(); IMAGES=()
cleanup() {
  for c in "${CONTAINERS[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
  for i in "${IMAGES[@]}"; do docker rmi -f "$i" >/dev/null 2>&1 || true; done
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"
LIMIT=$(ulimit -n)

echo "building lbproxy and benchtool..." >&2
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=bench.test \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

P=${PORT_BASE:-$("$WORK/benchtool" ports -n 6)}
echo "ports $P-$((P + 5))" >&2
BE=$P BEUP=$((P + 1)) LISTEN=127.0.0.1:$((P + 2)) LISTENTLS=127.0.0.1:$((P + 3)) ADMIN=127.0.0.1:$((P + 4)) NGX=127.0.0.1:$((P + 5))
"$WORK/benchtool" backends -addrs 127.0.0.1:$BE & PIDS+=($!)
bench_snapshot '"bench.test"' "127.0.0.1:$BE" > "$WORK/snapshot.json"
sed -e "s/\"port\":$BE,/\"port\":$BEUP,/" -e 's/"row":/"policy":{"pool":{"max_idle_conns_per_host":100000,"idle_timeout":"10m"}},"row":/' \
  "$WORK/snapshot.json" > "$WORK/snapshot-up.json"
NGINX=$(command -v nginx || true)

wait_up() { # $1: URL
  for _ in $(seq 100); do
    curl -fsk -o /dev/null -H 'Host: bench.test' "$1" && return 0
    sleep 0.1 # waiting for the process to bind
  done
  echo "$1 did not come up" >&2; return 1
}

# Where a count runs: "host", or "docker" with NOFILE for each container.
IMAGE=""; MODE=host; NOFILE=$LIMIT
docker_image() { # a FROM scratch image: the static binaries come from $WORK (mounted), nginx with its ldd libraries
  [ -n "$IMAGE" ] && return 0
  local root="$WORK/image"
  mkdir -p "$root/etc" "$root/tmp"
  printf 'root:x:0:0::/:/\nnobody:x:65534:65534::/:/\nwww-data:x:33:33::/:/\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\nwww-data:x:33:\n' > "$root/etc/group"
  if [ -n "$NGINX" ]; then
    for l in "$NGINX" $(ldd "$NGINX" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
      mkdir -p "$root$(dirname "$l")"; cp -L "$l" "$root$l"
    done
  fi
  IMAGE=sluice-idleconns:$$
  tar -C "$root" -c . | docker import - "$IMAGE" >/dev/null
  IMAGES+=("$IMAGE")
}
place() { # $1: fds one process needs; sets MODE and NOFILE, or answers 1 (skip)
  if [ "${DOCKER:-0}" != 1 ] && [ "$1" -le "$LIMIT" ]; then MODE=host; NOFILE=$LIMIT; return 0; fi
  if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
    echo "skipped: needs $1 fds, the hard limit here is $LIMIT and docker is not available"; return 1
  fi
  docker_image
  NOFILE=$(( $1 > LIMIT ? $1 : LIMIT ))
  local err
  err=$(docker run --rm --ulimit "nofile=$NOFILE:$NOFILE" -v "$WORK:$WORK" "$IMAGE" "$WORK/benchtool" 2>&1) || true
  if ! grep -q "usage: benchtool" <<< "$err"; then # benchtool without a command prints its usage: it ran
    echo "skipped: needs $1 fds, the hard limit here is $LIMIT, and docker cannot give a container more either: $(grep -o 'error setting rlimit.*' <<< "$err" | head -1)"
    return 1
  fi
  MODE=docker
  echo "in docker: --ulimit nofile=$NOFILE:$NOFILE --network host (the host limit is $LIMIT)"
}
start() { # $1: name; the rest: command. Sets pid (the host's pid of the process).
  local name=$1; shift
  if [ "$MODE" = host ]; then
    GOMAXPROCS=1 "$@" 2>"$WORK/$name.log" & pid=$!; PIDS+=($pid)
  else
    local c="sluice-idle-$name-$$"
    docker run -d --name "$c" --network host --ulimit "nofile=$NOFILE:$NOFILE" -e GOMAXPROCS=1 -v "$WORK:$WORK" "$IMAGE" "$@" >/dev/null
    CONTAINERS+=("$c")
    pid=$(docker inspect -f '{{.State.Pid}}' "$c")
  fi
}
stop() { # $1: name
  if [ "$MODE" = host ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  else docker logs "sluice-idle-$1-$$" >"$WORK/$1.log" 2>&1 || true; docker rm -f "sluice-idle-$1-$$" >/dev/null 2>&1 || true; fi
}
client() { # the command, on the host or in a container seeing the host's pids (benchtool reads /proc/PID)
  if [ "$MODE" = host ]; then "$@"
  else docker run --rm --network host --pid host --ulimit "nofile=$NOFILE:$NOFILE" -v "$WORK:$WORK" "$IMAGE" "$@"; fi
}
lbproxy() { # $1: row name, $2: snapshot; the rest: more flags
  local name=$1 snap=$2; shift 2
  start "$name" "$WORK/lbproxy" --proxy-cluster BENCH --id idle --config "$snap" \
    --listen $LISTEN --admin $ADMIN --admin-token bench --pprof \
    --access-log off --trace-sample 0 --max-client-conns 0 "$@" "${LBFLAGS[@]}"
}
nginx_conf() { # $1: listen directive, $2: worker connections, $3: upstream port, $4: upstream keepalive
  {
    echo "worker_processes 1; daemon off; pid $WORK/nginx.pid; error_log $WORK/nginx.err; worker_rlimit_nofile $NOFILE;"
    echo "events { worker_connections $2; multi_accept on; }"
    echo "http { access_log off; keepalive_requests 1000000; keepalive_timeout 90s;"
    echo " client_body_temp_path $WORK; proxy_temp_path $WORK; fastcgi_temp_path $WORK; uwsgi_temp_path $WORK; scgi_temp_path $WORK;"
    echo " upstream be { server 127.0.0.1:$3; keepalive $4; keepalive_timeout 10m; }"
    echo " ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem;"
    echo " server { $1 location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection \"\"; } } }"
  } > "$WORK/nginx.conf"
}
nginx_worker() { # sets worker: the nginx worker's host pid
  for _ in $(seq 50); do worker=$(pgrep -P "$pid" | head -1) && return 0; sleep 0.1; done # waiting for the fork
  echo "nginx: no worker" >&2; return 1
}

for n in $CONNS; do
  echo "== $n idle client connections"
  place $((n + 200)) || continue
  for row in $ROWS; do
    case $row in
      lbproxy|lbproxy-net|lbproxy-tls|lbproxy-tls-fast|lbproxy-h2|lbproxy-h2-sluice)
        extra=(); url=http://$LISTEN/; addr=$LISTEN; tls=()
        [ "$row" = lbproxy-net ] && extra=(--front std)
        case $row in lbproxy-tls*|lbproxy-h2*)
          extra=(--listen-tls $LISTENTLS --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem")
          url=https://$LISTENTLS/; addr=$LISTENTLS; tls=(-tls) ;; esac
        [ "$row" = lbproxy-tls ] && extra+=(--tls-front std)
        [ "$row" = lbproxy-tls-fast ] && extra+=(--tls-front fasthttp)
        case $row in lbproxy-h2*) tls=(-h2) ;; esac
        [ "$row" = lbproxy-h2-sluice ] && extra+=(--h2-server sluice)
        lbproxy "$row" "$WORK/snapshot.json" "${extra[@]}"
        wait_up "$url"
        prof=(); [ -n "${PROFILES:-}" ] && prof=(-heap-profile "$PROFILES/$row-$n.pprof")
        client "$WORK/benchtool" idle -label "$row" -addr "$addr" -pid "$pid" -conns "$n" -admin $ADMIN -token bench -rss-settle "$RSS_SETTLE" "${tls[@]}" "${prof[@]}"
        stop "$row" ;;
      nginx|nginx-tls|nginx-h2)
        [ -n "$NGINX" ] || { echo "$row: not installed, skipped"; continue; }
        listen="listen $NGX;"; url=http://$NGX/; tls=()
        case $row in nginx-tls) listen="listen $NGX ssl;"; url=https://$NGX/; tls=(-tls) ;;
          nginx-h2) listen="listen $NGX ssl http2;"; url=https://$NGX/; tls=(-h2) ;; esac
        nginx_conf "$listen" $((n + 100)) "$BE" 64
        start "$row" "$NGINX" -e stderr -c "$WORK/nginx.conf" -p "$WORK"
        wait_up "$url"
        nginx_worker
        client "$WORK/benchtool" idle -label "$row" -addr $NGX -pid "$worker" -conns "$n" -rss-settle "$RSS_SETTLE" "${tls[@]}"
        stop "$row" ;;
    esac
  done
done

for n in $UPCONNS; do
  echo "== $n idle upstream connections"
  place $((2 * n + 200)) || continue # the proxy holds a client and an upstream connection per request, then the upstream one
  for row in $UPROWS; do
    case $row in
      lbproxy-up|lbproxy-up-std)
        extra=(); [ "$row" = lbproxy-up-std ] && extra=(--upstream-client std)
        lbproxy "$row" "$WORK/snapshot-up.json" "${extra[@]}"
        client "$WORK/benchtool" idleup -label "$row" -addr $LISTEN -backend 127.0.0.1:$BEUP -pid "$pid" -conns "$n" -admin $ADMIN -token bench -rss-settle "$RSS_SETTLE"
        stop "$row" ;;
      nginx-up)
        [ -n "$NGINX" ] || { echo "$row: not installed, skipped"; continue; }
        nginx_conf "listen $NGX backlog=65535;" $((3 * n + 100)) "$BEUP" "$n" # the client connections come at once
        start "$row" "$NGINX" -e stderr -c "$WORK/nginx.conf" -p "$WORK"
        nginx_worker # idleup retries its warm-up request until nginx answers
        client "$WORK/benchtool" idleup -label "$row" -addr $NGX -backend 127.0.0.1:$BEUP -pid "$worker" -conns "$n" -rss-settle "$RSS_SETTLE"
        tail -3 "$WORK/nginx.err" >&2 || true
        stop "$row" ;;
    esac
  done
done
