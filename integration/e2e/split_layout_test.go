//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/snapshot"
)

// Issue 20: a snapshot stored in the split layout (per backend cluster
// parts) is applied by the real proxies and read back by lbctl get
// snapshot (with the explanations proxies skip) and lbctl diff.
func TestSplitLayoutAppliedAndReadByLbctl(t *testing.T) {
	f, good := fleetWithoutScheduler(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := next(good, good.Meta.Version+1, nil)
	for i := range snapshot.SplitMinClusters {
		c := s.Clusters["demo-main"]
		c.Policy.Health.Active = false // not routed to: no probes
		c.Explanation = &snapshot.Explanation{Mode: "static", Notes: []string{fmt.Sprintf("extra cluster %d", i)}}
		s.Clusters[fmt.Sprintf("extra-%02d", i)] = c
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	m, parts, err := snapshot.EncodeStore(s)
	if err != nil || m.Encoding != snapshot.EncodingSplit {
		t.Fatalf("EncodeStore: %q, %v; want the split layout", m.Encoding, err)
	}
	for _, p := range parts {
		k, _ := f.Layout.Part(p.Digest)
		if _, err := f.Client.Put(ctx, k, string(p.Data)); err != nil {
			t.Fatal(err)
		}
	}
	mj, _ := json.Marshal(m)
	writeSnapshot(ctx, t, f, "BFE2", s.Meta.Version, string(mj), snapshot.Pointer{Lineage: s.Meta.Lineage, Version: s.Meta.Version, Hash: s.Meta.Hash})
	if v := waitApplied(t, f, "BFE2", 60*time.Second); v != s.Meta.Version {
		t.Fatalf("BFE2 applied v%d, want the split v%d", v, s.Meta.Version)
	}
	out, code, err := f.Lbctl(ctx, "get", "snapshot", "--proxy-cluster", "BFE2", "-o", "json")
	if err != nil || code != 0 {
		t.Fatalf("lbctl get snapshot: exit %d, %v: %s", code, err, out)
	}
	var got snapshot.Snapshot
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("lbctl get snapshot -o json: %v: %s", err, out)
	}
	if got.Meta.Version != s.Meta.Version || got.Meta.Hash != s.Meta.Hash || len(got.Clusters) != len(s.Clusters) ||
		got.Clusters["extra-03"].Explanation == nil || got.Clusters["extra-03"].Explanation.Notes[0] != "extra cluster 3" {
		t.Fatalf("lbctl read v%d hash %s with %d clusters (extra-03 explained: %+v); want v%d hash %s with %d",
			got.Meta.Version, got.Meta.Hash, len(got.Clusters), got.Clusters["extra-03"].Explanation, s.Meta.Version, s.Meta.Hash, len(s.Clusters))
	}
	out, code, err = f.Lbctl(ctx, "diff", "--proxy-cluster", "BFE2", fmt.Sprint(good.Meta.Version), fmt.Sprint(s.Meta.Version))
	if err != nil || code != 0 || !strings.Contains(out, "extra-00") {
		t.Fatalf("lbctl diff old layout → split layout: exit %d, %v, want extra-00 in:\n%s", code, err, out)
	}
}
