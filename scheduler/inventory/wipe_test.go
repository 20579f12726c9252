package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// etcd is wiped under a running scheduler (a fresh store on the same
// address) and agents register again at once, so the new store passes the
// old revision: the inventory notices by the lineage record, relists every
// input, and keeps nothing of the old store's desired state or demand — the
// scheduler must not republish them into a new lineage. A desired state
// written to the new store is then read from it.
func TestWipedEtcdUnderRunningInventory(t *testing.T) {
	srv, cli := etcdtest.New(t)
	b, _ := json.Marshal(snapshot.LineageRecord{ID: "L1", CreatedAt: time.Now().UTC()})
	put(t, cli, layout.Lineage(), string(b))
	put(t, cli, layout.Desired(), desired)
	dk, err := layout.Demand("BFE1", "p1")
	if err != nil {
		t.Fatal(err)
	}
	db, _ := json.Marshal(report.Demand{ProxyCluster: "BFE1", ID: "p1", Clusters: map[string]report.ClusterDemand{"demo-main": {RPS: 40}}})
	put(t, cli, dk, string(db))
	for i := range 20 { // a revision the fresh store is far from
		put(t, cli, fmt.Sprintf("/sluice/status/BFE1/x%d", i), "{}")
	}
	reg := prometheus.NewRegistry()
	inv := New(cli, layout, Options{Now: time.Now, Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	poll.EventuallyTrue(t, 10*time.Second, "old store listed", func() bool {
		v := inv.View()
		return v.Synced && v.State != nil && v.Demand["BFE1"]["demo-main"] == 40
	})

	if err := srv.Wipe(); err != nil {
		t.Fatal(err)
	}
	wiped := time.Now()
	ik := instKey(t, "demo-main", "SC2", "127.0.0.1:8002")
	put(t, cli, ik, instJSON(t, config.StateHealthy, 1))
	for i := range 40 { // past the old revision: only the lineage record tells
		put(t, cli, fmt.Sprintf("/sluice/status/BFE1/y%d", i), "{}")
	}
	poll.EventuallyTrue(t, 15*time.Second, "old desired state and demand dropped", func() bool {
		v := inv.View()
		return v.State == nil && len(v.Demand) == 0
	})
	t.Logf("relisted %v after the wipe", time.Since(wiped).Round(10*time.Millisecond))
	if n := testutil.ToFloat64(inv.m.resyncs.WithLabelValues(inDesired)); n < 1 {
		t.Fatalf("desired input resyncs = %v, want >= 1", n)
	}
	put(t, cli, layout.Desired(), desired)
	poll.EventuallyTrue(t, 10*time.Second, "new store's desired state and instance read", func() bool {
		v := inv.View()
		return v.State != nil && len(v.Members["demo-main"]["SC2"]) == 1
	})
}
