package lbscheduler

import (
	"strings"
	"testing"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/scheduler/internal/shift"
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

// A write marked --urgent skips the stages for the change it brings, not for
// later changes computed from the same desired state; an urgent shift for
// each of its steps, on its own proxy cluster only.
func TestMarkedUrgent(t *testing.T) {
	st := &config.State{Urgent: &config.Urgent{Author: "alice", What: "lbctl weights set"}}
	older := &snapshot.Snapshot{Meta: snapshot.Meta{Inputs: &snapshot.Inputs{Desired: 7}}}
	in := &snapshot.Inputs{Desired: 9}
	if got := markedUrgent(st, nil, "BFE1", older, in); got != "lbctl weights set --urgent by alice (desired state revision 9)" {
		t.Fatalf("urgent write: %q", got)
	}
	same := &snapshot.Snapshot{Meta: snapshot.Meta{Inputs: &snapshot.Inputs{Desired: 9}}}
	if got := markedUrgent(st, nil, "BFE1", same, in); got != "" {
		t.Fatalf("a later change of the same desired state is urgent: %q", got)
	}
	if got := markedUrgent(&config.State{}, nil, "BFE1", older, in); got != "" {
		t.Fatalf("an unmarked write is urgent: %q", got)
	}
	active := []shift.Active{{Shift: config.Shift{ID: "shift-1", ProxyCluster: "BFE1", Author: "bob", Urgent: true}}}
	if got := markedUrgent(&config.State{}, active, "BFE1", same, in); got != "shift shift-1 --urgent by bob" {
		t.Fatalf("urgent shift: %q", got)
	}
	if got := markedUrgent(&config.State{}, active, "BFE2", same, in); got != "" {
		t.Fatalf("an urgent shift of another proxy cluster: %q", got)
	}
}
