package lbproxy

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// --max-instances refuses a snapshot over the limit before it is applied,
// naming the count and the flag; at or under it, and without a limit, the
// snapshot is applied.
func TestLimitInstances(t *testing.T) {
	in := func(ip string) config.Instance { return config.Instance{Addr: ip, Port: 8001, Weight: 1} }
	s := &snapshot.Snapshot{
		Meta:     snapshot.Meta{ProxyCluster: "BFE1", Version: 3, Parent: 2, Author: "test", CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)},
		Settings: snapshot.Settings{IDC: "IDC1"},
		Products: map[string]config.Product{"demo": {Hosts: []string{"demo.sluice.test"},
			Rules: []config.Rule{{Name: "all", Cond: "default_t()", Cluster: "demo-main"}}}},
		DefaultProduct: "demo",
		Clusters: map[string]snapshot.Cluster{"demo-main": {
			SubClusters: map[string]config.SubCluster{
				"SC1": {IDC: "IDC1", Instances: []config.Instance{in("127.0.0.1"), in("127.0.0.3"), in("127.0.0.4")}},
				"SC2": {IDC: "IDC2", Instances: []config.Instance{in("127.0.0.2")}},
			},
			Policy: config.DefaultPolicy(),
			Row:    snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 50, "SC2": 50}},
		}},
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	c, err := validate.Check(s)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	apply := func(validate.Checked) error { applied++; return nil }
	err = limitInstances(3, apply)(c)
	if err == nil || err.Error() != "snapshot v3 has 4 backend instances, over this proxy's --max-instances 3" || applied != 0 {
		t.Fatalf("over the limit: %v (applied %d)", err, applied)
	}
	for _, max := range []int{4, 0} {
		if err := limitInstances(max, apply)(c); err != nil {
			t.Fatalf("limit %d: %v", max, err)
		}
	}
	if applied != 2 {
		t.Fatalf("applied %d times, want 2", applied)
	}
	boom := errors.New("boom")
	if err := limitInstances(10, func(validate.Checked) error { return boom })(c); !errors.Is(err, boom) {
		t.Fatalf("apply's own error: %v", err)
	}
}
