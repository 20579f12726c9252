#!/usr/bin/env bash
# stage-host-etcd.sh BIN DIR — copy a dynamically linked etcd server (Debian's
# /usr/bin/etcd, package etcd-server 3.4.x) and the shared libraries it loads
# (as ldd resolves them, at their own paths) into DIR, the root of the
# FROM scratch image sluice/etcd-debian (deploy/images/etcd-debian.Dockerfile).
# A static binary is copied alone. Exit 1 when BIN is missing.
set -euo pipefail
bin=${1:-/usr/bin/etcd}
dir=${2:?usage: stage-host-etcd.sh BIN DIR}
if [ ! -x "$bin" ]; then
  echo "stage-host-etcd: $bin not found (apt-get install etcd-server)" >&2
  exit 1
fi
rm -rf "$dir"
mkdir -p "$dir"
cp "$bin" "$dir/etcd"
# ldd lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
libs=$(ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u) || true
for l in $libs; do
  mkdir -p "$dir$(dirname "$l")"
  cp -L "$l" "$dir$l"
done
"$bin" --version | sed -n 1p
echo "staged $bin with $(echo "$libs" | grep -c . || true) libraries: $(echo $libs)"
