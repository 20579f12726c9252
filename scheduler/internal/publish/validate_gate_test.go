package publish

import (
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// I7: the publisher runs validate.Snapshot itself, whatever its caller
// checked. Each snapshot below is well-formed and carries its own correct
// content hash, so only the validator can refuse it; Publish must return
// ErrInvalid wrapping the validator's Errors (naming the rule) and write
// nothing at all: no manifest, no part, no pointer move, not one etcd
// revision. A valid v1 goes first, so whatever a first publish sets up
// (e.g. a lineage key) exists before the refusals are counted.
func TestI7PublisherValidatesBeforeWriting(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	edit := func(f func(c *snapshot.Cluster, s *snapshot.Snapshot)) *snapshot.Snapshot {
		s := snap(60, 0)
		c := s.Clusters["demo-main"]
		f(&c, s)
		s.Clusters["demo-main"] = c
		s.Meta.Hash = snapshot.ContentHash(s)
		return s
	}
	cases := []struct {
		name, want string // want: a word of the validator's message
		s          *snapshot.Snapshot
	}{
		{"row sums to 90", "sum", edit(func(c *snapshot.Cluster, _ *snapshot.Snapshot) {
			c.Row.Weights = map[string]int{"SC1": 50, "SC2": 40, config.Blackhole: 0}
		})},
		{"weight on an unknown sub-cluster", "SC9", edit(func(c *snapshot.Cluster, _ *snapshot.Snapshot) {
			c.Row.Weights = map[string]int{"SC1": 50, "SC9": 50, config.Blackhole: 0}
		})},
		{"instance port 0", "port", edit(func(c *snapshot.Cluster, _ *snapshot.Snapshot) {
			sc := c.SubClusters["SC2"]
			sc.Instances = []config.Instance{{Addr: "127.0.0.1", Port: 0, Weight: 1}}
			c.SubClusters = map[string]config.SubCluster{"SC1": c.SubClusters["SC1"], "SC2": sc}
		})},
		{"unparsable rule condition", "cond", edit(func(_ *snapshot.Cluster, s *snapshot.Snapshot) {
			s.Products = map[string]config.Product{"demo": {Hosts: []string{"demo.example"}, Rules: []config.Rule{{Cond: `req_path_prefix_in("/x"`, Cluster: "demo-main"}}}}
		})},
		{"rule to a missing cluster", "nope", edit(func(_ *snapshot.Cluster, s *snapshot.Snapshot) {
			s.Products = map[string]config.Product{"demo": {Hosts: []string{"demo.example"}, Rules: []config.Rule{{Cond: "default_t()", Cluster: "nope"}}}}
		})},
	}
	if r, err := p.Publish(ctx, l, snap(50, 0), "valid first"); err != nil || r.Outcome != Published || r.Version != 1 {
		t.Fatalf("valid first publish: %+v %v", r, err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := validate.Snapshot(tc.s); err == nil {
				t.Fatalf("fixture is valid: the case proves nothing")
			}
			before, err := cli.Get(ctx, layout.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Publish(ctx, l, tc.s, "invalid on purpose")
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Publish = %+v, %v; want ErrInvalid", res, err)
			}
			if _, ok := validate.AsErrors(err); !ok || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not carry the validator's Errors naming %q", err, tc.want)
			}
			after, err := cli.Get(ctx, layout.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			if after.Header.Revision != before.Header.Revision || after.Count != before.Count {
				t.Fatalf("a refused snapshot wrote: revision %d → %d, keys %d → %d", before.Header.Revision, after.Header.Revision, before.Count, after.Count)
			}
			if n := count(t, cli, layout.Root()+"snapshots/"); n != 1 {
				t.Fatalf("%d manifests after refused publishes, want v1's only", n)
			}
			if n := count(t, cli, layout.PartsPrefix()); n != 0 {
				t.Fatalf("%d parts after refused publishes", n)
			}
			if ptr, _, err := p.Current(ctx, "BFE1"); err != nil || ptr.Version != 1 {
				t.Fatalf("current pointer %+v (%v) after refused publishes, want v1", ptr, err)
			}
		})
	}
	// The gate refuses only what is invalid: the same publisher then
	// commits a valid snapshot as v2.
	if r, err := p.Publish(ctx, l, snap(60, 0), "valid"); err != nil || r.Outcome != Published || r.Version != 2 {
		t.Fatalf("valid publish after the refusals: %+v %v", r, err)
	}
}
