package plan

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

// Draining every sub-cluster of a pinned row leaves it all GSLB_BLACKHOLE:
// Check names the proxy cluster, the cluster and the validator's rule; a
// drain carrying allow_full_drop makes the same plan publishable.
func TestCheckRejectsFullDropOfPinnedRow(t *testing.T) {
	st := twoIDC(1000, 1000)
	st.Pins = []config.Pin{{ProxyCluster: "BFE1", Cluster: "demo-main", Weights: map[string]int{"SC1": 50, "SC2": 50}}}
	rej, err := Check(View{State: st})
	if err != nil || len(rej) != 0 {
		t.Fatalf("undrained: rejections %+v, err %v; want none", rej, err)
	}
	st.Drains = []config.Drain{{Cluster: "demo-main", SubCluster: "SC1"}, {Cluster: "demo-main", SubCluster: "SC2"}}
	rej, err = Check(View{State: st})
	if err != nil {
		t.Fatal(err)
	}
	if len(rej) != 1 || rej[0].ProxyCluster != "BFE1" || strings.Join(rej[0].FullDrops, ",") != "demo-main" {
		t.Fatalf("rejections %+v; want BFE1 with a full drop of demo-main", rej)
	}
	want := "clusters.demo-main.row.weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it"
	if got := rej[0].Errs.Error(); got != want {
		t.Fatalf("reason %q; want %q", got, want)
	}

	st.Drains[1].AllowFullDrop = true
	rej, err = Check(View{State: st})
	if err != nil || len(rej) != 0 {
		t.Fatalf("drain with allow_full_drop: rejections %+v, err %v; want none", rej, err)
	}
	res := mustCompute(t, NewPlanner(), View{State: st}, nil)
	if r := res.Snapshots["BFE1"].Clusters["demo-main"].Row; !r.AllowFullDrop || r.Weights[config.Blackhole] != 100 {
		t.Fatalf("BFE1 row %+v; want a full drop allowed", r)
	}
}

// Unpinned rows never fail: a cluster with everything drained is a full
// drop the drains themselves authorise.
func TestCheckAcceptsFullyDrainedComputedRows(t *testing.T) {
	st := twoIDC(1000, 1000)
	st.Drains = []config.Drain{{Cluster: "demo-main", SubCluster: "SC1"}, {Cluster: "demo-main", SubCluster: "SC2"}}
	rej, err := Check(View{State: st, Demand: demand(100, 100)})
	if err != nil || len(rej) != 0 {
		t.Fatalf("rejections %+v, err %v; want none", rej, err)
	}
	if _, err := Check(View{}); err == nil {
		t.Fatal("Check without a desired state: want an error")
	}
}
