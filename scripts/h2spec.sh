#!/usr/bin/env bash
# scripts/h2spec.sh — HTTP/2 conformance of lbproxy's TLS front (h2spec,
# github.com/summerwind/h2spec) for each --h2-server, and the gate of
# --h2-server sluice: it must pass every case the xnet server (net/http's)
# passes. Prints each server's passed/failed counts and the cases only one
# of them fails; exits 1 when sluice fails a case xnet passes, 2 when a tool
# is missing.
#
# Usage: scripts/h2spec.sh            (H2SPEC=path, SERVERS="xnet sluice", KEEP=1 keeps the work directory)
# CI (.ci/run): go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible, openssl.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
H2SPEC=${H2SPEC:-$(command -v h2spec || echo "$HOME/go/bin/h2spec")}
SERVERS=${SERVERS:-"xnet sluice"}
[ -x "$H2SPEC" ] || { echo "h2spec.sh needs h2spec (go install github.com/summerwind/h2spec/cmd/h2spec@latest)" >&2; exit 2; }
command -v openssl >/dev/null || { echo "h2spec.sh needs openssl" >&2; exit 2; }
WORK=$(mktemp -d /tmp/sluice-h2spec.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT

(cd "$ROOT" && CGO_ENABLED=0 go build -o "$WORK/lbproxy" ./proxy/cmd/lbproxy)
(cd "$ROOT/bench" && GOWORK=off CGO_ENABLED=0 go build -o "$WORK/benchtool" ./benchtool)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=h2spec.test \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
P=${PORT_BASE:-$("$WORK/benchtool" ports -n 20)}
BE=127.0.0.1:$((P + 19))
"$WORK/benchtool" backends -addrs "$BE" & PIDS+=($!)
cat > "$WORK/snapshot.json" <<JSON
{"meta":{"proxy_cluster":"H2SPEC","version":1,"created_at":"2025-01-01T00:00:00Z"},
 "products":{"p":{"hosts":["127.0.0.1","localhost"],"rules":[{"name":"all","cond":"default_t()","cluster":"be"}]}},
 "default_product":"p",
 "clusters":{"be":{"subclusters":{"SC1":{"idc":"IDC1","instances":[{"addr":"127.0.0.1","port":$((P + 19)),"weight":1}]}},
   "row":{"denominator":100,"weights":{"SC1":100}}}}}
JSON
status=0
i=0
for srv in $SERVERS; do
  i=$((i + 1))
  "$WORK/lbproxy" --proxy-cluster H2SPEC --id "h2spec-$srv" --config "$WORK/snapshot.json" \
    --listen 127.0.0.1:$((P + 3 * i + 1)) --admin 127.0.0.1:$((P + 3 * i + 2)) --access-log off --trace-sample 0 \
    --listen-tls 127.0.0.1:$((P + 3 * i)) --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" \
    --h2-server "$srv" 2>"$WORK/$srv.log" & PIDS+=($!); LB=$!
  for _ in $(seq 100); do
    curl -sk -o /dev/null "https://127.0.0.1:$((P + 3 * i))/" && break
    sleep 0.1
  done
  "$H2SPEC" -t -k -h 127.0.0.1 -p $((P + 3 * i)) -j "$WORK/$srv.xml" >"$WORK/$srv.out" 2>&1 || true
  # the failed cases, one a line: "section number: description"
  # h2spec writes a failure's text into its report unescaped (innerxml), so an
  # error message holding "<" or "&", or a frame's raw bytes (a PING's
  # opaque data: NULs), breaks the XML: drop control characters and escape
  # those bodies first
  python3 - "$WORK/$srv.xml" >"$WORK/$srv.failed" <<'PY'
import re, sys, html, xml.etree.ElementTree as ET
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
text = re.sub(r"[\x00-\x08\x0b\x0c\x0e-\x1f]", "", text)
text = re.sub(r"<(failure|error|skipped)>(.*?)</\1>",
              lambda m: "<%s>%s</%s>" % (m.group(1), html.escape(m.group(2), quote=False), m.group(1)),
              text, flags=re.S)
for tc in ET.fromstring(text).iter("testcase"):
    if tc.find("failure") is not None or tc.find("error") is not None:
        print(tc.get("package", "") + " " + tc.get("classname", ""))
PY
  kill "$LB"; wait "$LB" 2>/dev/null || true
  echo "$srv: $(tail -n 1 "$WORK/$srv.out")"
done
if [ -f "$WORK/xnet.failed" ] && [ -f "$WORK/sluice.failed" ]; then
  only=$(comm -13 <(sort "$WORK/xnet.failed") <(sort "$WORK/sluice.failed"))
  fixed=$(comm -23 <(sort "$WORK/xnet.failed") <(sort "$WORK/sluice.failed"))
  [ -n "$fixed" ] && { echo "failed by xnet only:"; echo "$fixed" | sed 's/^/  /'; }
  if [ -n "$only" ]; then
    echo "FAILED by sluice only (the gate):"; echo "$only" | sed 's/^/  /'
    sed -n '/^Failures:/,$p' "$WORK/sluice.out" | tr -d '\000-\010'
    status=1
  else
    echo "gate: sluice passes every case xnet passes"
  fi
fi
exit $status
