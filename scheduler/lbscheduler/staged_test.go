package lbscheduler

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

func urgentSnap(weights map[string]int, sc2 []config.Instance) *snapshot.Snapshot {
	return &snapshot.Snapshot{Clusters: map[string]snapshot.Cluster{"demo-main": {
		SubClusters: map[string]config.SubCluster{
			"SC1": {Instances: []config.Instance{{Addr: "127.0.0.1", Port: 1, Weight: 1}}},
			"SC2": {Instances: sc2},
		},
		Row: snapshot.Row{Denominator: 100, Weights: weights},
	}}}
}

// Drains and weight leaving a sub-cluster with nothing available skip the
// stages; an ordinary change does not.
func TestUrgentReason(t *testing.T) {
	up := []config.Instance{{Addr: "127.0.0.2", Port: 1, Weight: 1}}
	down := []config.Instance{{Addr: "127.0.0.2", Port: 1, Weight: 1, State: config.StateUnhealthy}}
	live := urgentSnap(map[string]int{"SC1": 50, "SC2": 50}, up)
	st := &config.State{}
	if got := urgentReason(st, live, urgentSnap(map[string]int{"SC1": 60, "SC2": 40}, up)); got != "" {
		t.Fatalf("an ordinary change is urgent: %q", got)
	}
	if got := urgentReason(st, live, urgentSnap(map[string]int{"SC1": 100, "SC2": 0}, down)); !strings.Contains(got, "weight leaving cluster demo-main sub-cluster SC2, which has no available instance") {
		t.Fatalf("weight leaving a dead sub-cluster: %q", got)
	}
	st.Drains = []config.Drain{{Cluster: "demo-main", SubCluster: "SC2"}}
	if got := urgentReason(st, live, urgentSnap(map[string]int{"SC1": 100, "SC2": 0}, up)); got != "drain of cluster demo-main sub-cluster SC2" {
		t.Fatalf("drain: %q", got)
	}
	if got := urgentReason(st, urgentSnap(map[string]int{"SC1": 100, "SC2": 0}, up), urgentSnap(map[string]int{"SC1": 90, "SC2": 0}, up)); got != "" {
		t.Fatalf("a drained sub-cluster without live weight is no longer urgent: %q", got)
	}
}
