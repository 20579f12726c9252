//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// Catalogue C5: a huge table applied under load. With the scheduler
// stopped, a snapshot that adds a cluster of 10 000 instances (not routed
// to) is written straight into etcd, twice, while 4 workers send GETs to
// both BFE2 proxies. The apply happens off the request path: 0 failed
// requests, the slowest answer during the applies bounded, and the time
// from the write to both proxies applying it measured.
func TestFaultsHugeTableUnderLoad(t *testing.T) {
	f, good := fleetWithoutScheduler(t)
	v := good.Meta.Version
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := startLoad(proxyURLs(f, "BFE2"), 41)
	defer l.end()
	l.waitSent(t, 200)

	const n = 10000
	var applyTimes []time.Duration
	var size int
	for round := 1; round <= 2; round++ {
		s := next(good, v+uint64(round), nil)
		big := s.Clusters["demo-main"]
		var ins []config.Instance
		for i := 0; i < n; i++ {
			ins = append(ins, config.Instance{Addr: fmt.Sprintf("127.%d.%d.%d", 100+round, i/250, 1+i%250), Port: 8080, Weight: 1 + i%10})
		}
		big.SubClusters = map[string]config.SubCluster{"BIG": {IDC: "IDC2", Instances: ins}}
		big.Row = snapshot.Row{Denominator: 100, Weights: map[string]int{"BIG": 100}}
		big.Explanation = nil
		// Active health checks off: with them on (every 500 ms to 10 000
		// unreachable addresses) the probes starve the proxy — healthy
		// instances of demo-main marked DOWN, traffic nearly stopped — a
		// finding of its own (docs/TESTING.md).
		big.Policy.Health.Active = false
		s.Clusters["huge"] = big
		s.Meta.Hash = snapshot.ContentHash(s)
		m, parts, err := snapshot.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		mj, _ := json.Marshal(m)
		size = m.Size
		for _, p := range parts {
			k, _ := f.Layout.Part(p.Digest)
			if _, err := f.Client.Put(ctx, k, string(p.Data)); err != nil {
				t.Fatal(err)
			}
		}
		began := time.Now()
		writeSnapshot(ctx, t, f, "BFE2", s.Meta.Version, string(mj), snapshot.Pointer{Lineage: s.Meta.Lineage, Version: s.Meta.Version, Hash: s.Meta.Hash})
		eventually(t, 60*time.Second, fmt.Sprintf("both BFE2 proxies apply the %d-instance v%d", n, s.Meta.Version), func() error {
			for _, p := range f.ProxiesOf("BFE2") {
				var st struct {
					AppliedVersion  uint64 `json:"applied_version"`
					RejectedVersion uint64 `json:"rejected_version"`
					RejectedReason  string `json:"rejected_reason"`
				}
				if err := getJSON(p.AdminURL+"/v1/status", &st); err != nil {
					return err
				}
				if st.RejectedVersion == s.Meta.Version {
					t.Fatalf("%s refused the huge table: %s", p.ID, st.RejectedReason)
				}
				if st.AppliedVersion != s.Meta.Version {
					return fmt.Errorf("%s applied v%d", p.ID, st.AppliedVersion)
				}
			}
			return nil
		})
		applyTimes = append(applyTimes, time.Since(began))
		l.waitSent(t, 200)
	}
	failed, sent, slowest, failures := l.end()
	t.Logf("C5 two %d-instance tables (%d kB compressed) applied under load: written → applied by both proxies in %v; %d of %d requests failed, slowest answer %.3f s",
		n, size/1024, applyTimes, failed, sent, slowest.Seconds())
	if failed != 0 {
		t.Errorf("C5: %d of %d requests failed while huge tables were applied: %v", failed, sent, failures)
	}
	if slowest > 2*time.Second {
		t.Errorf("C5: slowest answer %s during the applies, want ≤ 2 s (the apply is off the request path)", slowest)
	}
}
