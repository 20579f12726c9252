# bench/snapshot.sh — sourced by the bench scripts: the one snapshot they
# serve (proxy cluster BENCH, product "bench", one cluster "be" of one
# sub-cluster SC1 taking the whole row).
#
# bench_snapshot HOSTS INSTANCE...: the snapshot JSON on stdout. HOSTS is the
# product's host list as JSON strings ("bench.test" or "bench.test","127.0.0.1");
# each INSTANCE is host:port or host:port=weight (weight 1 when left out).
bench_snapshot() {
  local hosts=$1 inst="" a w
  shift
  for a in "$@"; do
    w=1
    [[ $a == *=* ]] && { w=${a#*=}; a=${a%=*}; }
    inst+="{\"addr\":\"${a%:*}\",\"port\":${a##*:},\"weight\":$w},"
  done
  cat <<JSON
{"meta":{"proxy_cluster":"BENCH","version":1,"created_at":"2025-01-01T00:00:00Z"},
 "products":{"bench":{"hosts":[$hosts],"rules":[{"name":"all","cond":"default_t()","cluster":"be"}]}},
 "default_product":"bench",
 "clusters":{"be":{"subclusters":{"SC1":{"idc":"IDC1","instances":[${inst%,}]}},
   "row":{"denominator":100,"weights":{"SC1":100}}}}}
JSON
}
