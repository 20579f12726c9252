package lbproxy

import (
	"context"
	"strings"
	"testing"
)

// noProxyCluster makes startWith run without --proxy-cluster.
const noProxyCluster = "(none)"

// Issue 17.4: a BFE configuration directory alone is enough — its proxy
// cluster is BFE's default name — as is a desired-state file with one proxy
// cluster; etcd mode still needs --proxy-cluster.
func TestProxyClusterOptionalWithFiles(t *testing.T) {
	r := start(t, Config{BFEConfDir: "../../api/bfe/testdata/mission", ProxyCluster: noProxyCluster})
	if st := adminStatus(t, r); st.AppliedVersion == 0 || st.Source != "file" {
		t.Fatalf("BFE directory without --proxy-cluster: status %+v, want a snapshot applied from the file", st)
	}
	err := Run(context.Background(), Config{ID: "p1", Etcd: Etcd{Endpoints: []string{"127.0.0.1:1"}}, Listen: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "proxy cluster") {
		t.Fatalf("etcd mode without a proxy cluster: %v, want a proxy cluster error", err)
	}
}
