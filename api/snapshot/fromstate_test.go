package snapshot

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sluicelb/sluice/api/config"
)

func inst(w ...int) []config.Instance {
	var out []config.Instance
	for i, x := range w {
		out = append(out, config.Instance{Addr: "10.0.0.1", Port: 8000 + i, Weight: x, Labels: map[string]string{"i": "x"}})
	}
	return out
}

func testState() *config.State {
	return &config.State{
		Topology: config.Topology{
			IDCs: []string{"IDC1", "IDC2"},
			ProxyClusters: map[string]config.ProxyCluster{
				"BFE1": {IDC: "IDC1", TrustedProxies: []string{"127.0.0.0/8"}},
				"BFE2": {IDC: "IDC2"},
			},
		},
		Products:       map[string]config.Product{"demo": {Hosts: []string{"demo.local"}, Rules: []config.Rule{{Cond: "default_t()", Cluster: "main"}}}},
		DefaultProduct: "demo",
		Clusters: map[string]config.Cluster{
			"main": {Policy: config.DefaultPolicy(), SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: inst(10, 10)},
				"SC2": {IDC: "IDC2", Instances: inst(10, 10)},
			}},
			"thirds": {Policy: config.DefaultPolicy(), SubClusters: map[string]config.SubCluster{
				"A": {IDC: "IDC1", Instances: inst(1)}, "B": {IDC: "IDC1", Instances: inst(1)}, "C": {IDC: "IDC2", Instances: inst(1)},
			}},
			"drained": {Policy: config.DefaultPolicy(), SubClusters: map[string]config.SubCluster{
				"A": {IDC: "IDC1", Instances: inst(30)}, "B": {IDC: "IDC1", Instances: inst(10)}, "X": {IDC: "IDC2", Instances: inst(5), Excluded: true},
			}},
			"agents": {Policy: config.DefaultPolicy(), SubClusters: map[string]config.SubCluster{"A": {IDC: "IDC1"}, "B": {IDC: "IDC2"}}},
			"gone":   {Policy: config.DefaultPolicy(), SubClusters: map[string]config.SubCluster{"A": {IDC: "IDC1", Instances: inst(3), Excluded: true}}},
		},
		Pins:   []config.Pin{{ProxyCluster: "BFE1", Cluster: "main", Weights: map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}}},
		Drains: []config.Drain{{Cluster: "drained", SubCluster: "B"}},
	}
}

func TestFromStateRows(t *testing.T) {
	s := testState()
	snap, err := FromState(s, "BFE1", Meta{Version: 7, Author: "test"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Row{
		"main":    {Denominator: 100, Weights: map[string]int{"SC1": 45, "SC2": 45, config.Blackhole: 10}, Pinned: true},
		"thirds":  {Denominator: 100, Weights: map[string]int{"A": 34, "B": 33, "C": 33, config.Blackhole: 0}}, // largest remainder, ties to the first name
		"drained": {Denominator: 100, Weights: map[string]int{"A": 100, "B": 0, "X": 0, config.Blackhole: 0}},
		"agents":  {Denominator: 100, Weights: map[string]int{"A": 50, "B": 50, config.Blackhole: 0}}, // no instance weight yet: equal split
		"gone":    {Denominator: 100, Weights: map[string]int{"A": 0, config.Blackhole: 100}, AllowFullDrop: true},
	}
	for name, row := range want {
		if got := snap.Clusters[name].Row; !reflect.DeepEqual(got, row) {
			t.Errorf("%s row: got %+v, want %+v", name, got, row)
		}
	}
	if !snap.Clusters["drained"].SubClusters["B"].Excluded {
		t.Error("drained sub-cluster B is not excluded in the snapshot")
	}
	if s.Clusters["drained"].SubClusters["B"].Excluded {
		t.Error("FromState modified the state")
	}
	if !reflect.DeepEqual(snap.Meta, Meta{ProxyCluster: "BFE1", Version: 7, Author: "test", Hash: ContentHash(snap)}) {
		t.Errorf("meta: %+v", snap.Meta)
	}
	if snap.Settings.IDC != "IDC1" || !reflect.DeepEqual(snap.Settings.TrustedProxies, []string{"127.0.0.0/8"}) ||
		snap.DefaultProduct != "demo" || !reflect.DeepEqual(snap.Products, s.Products) {
		t.Errorf("settings/products: %+v %+v", snap.Settings, snap.Products)
	}
	// BFE2 has no pin for main: capacity-proportional 50/50.
	snap2, err := FromState(s, "BFE2", Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if got := snap2.Clusters["main"].Row.Weights; !reflect.DeepEqual(got, map[string]int{"SC1": 50, "SC2": 50, config.Blackhole: 0}) {
		t.Errorf("BFE2 main: %v", got)
	}
	if snap2.Meta.Hash == snap.Meta.Hash {
		t.Error("different rows, same hash")
	}
	// The snapshot shares no memory with the state.
	snap.Clusters["main"].SubClusters["SC1"].Instances[0].Labels["i"] = "changed"
	snap.Products["demo"].Rules[0] = config.Rule{}
	if s.Clusters["main"].SubClusters["SC1"].Instances[0].Labels["i"] != "x" || s.Products["demo"].Rules[0].Cluster != "main" {
		t.Error("snapshot aliases the state")
	}
}

func TestFromStateUnknownProxyCluster(t *testing.T) {
	_, err := FromState(testState(), "NOPE", Meta{})
	if !errors.Is(err, ErrUnknownProxyCluster) || err.Error() != `snapshot from state: unknown proxy cluster "NOPE" (topology has [BFE1 BFE2])` {
		t.Fatalf("got %v", err)
	}
}

func TestFromStateIsDeterministic(t *testing.T) {
	a, _ := FromState(testState(), "BFE1", Meta{Version: 1})
	b, _ := FromState(testState(), "BFE1", Meta{Version: 2})
	if a.Meta.Hash != b.Meta.Hash {
		t.Errorf("same content, hashes %s and %s", a.Meta.Hash, b.Meta.Hash)
	}
}

func TestLargestRemainder(t *testing.T) {
	for _, tc := range []struct {
		w    []int64
		want []int
	}{
		{[]int64{1, 1, 1}, []int{34, 33, 33}},
		{[]int64{80, 10}, []int{89, 11}},
		{[]int64{2, 1}, []int{67, 33}},
		{[]int64{0, 5}, []int{0, 100}},
		{[]int64{1, 1, 1, 1, 1, 1, 1}, []int{15, 15, 14, 14, 14, 14, 14}},
		{[]int64{999_999, 1}, []int{100, 0}},
	} {
		got := LargestRemainder(tc.w, 100)
		sum := 0
		for _, g := range got {
			sum += g
		}
		if !reflect.DeepEqual(got, tc.want) || sum != 100 {
			t.Errorf("LargestRemainder(%v) = %v, want %v", tc.w, got, tc.want)
		}
	}
}
