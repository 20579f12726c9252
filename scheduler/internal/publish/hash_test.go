package publish

import (
	"testing"

	"github.com/sluicelb/sluice/testkit/etcdtest"
)

// TestPublishFillsMissingHash: a snapshot given without Meta.Hash is
// published under its content hash (computed by Publish, on a copy: the
// input keeps its empty hash), and the same content given with that hash is
// then Unchanged.
func TestPublishFillsMissingHash(t *testing.T) {
	_, cli := etcdtest.New(t)
	ctx := ctxT(t)
	l := lead(t, cli, "S1")
	p := New(cli, layout, Options{Author: "lbscheduler/S1"})
	in := snap(60, 0)
	want := in.Meta.Hash
	in.Meta.Hash = ""
	r, err := p.Publish(ctx, l, in, "no hash given")
	if err != nil || r.Outcome != Published || r.Version != 1 || r.Hash != want {
		t.Fatalf("publish without hash: %+v, %v; want Published v1 %s", r, err, want)
	}
	if in.Meta.Hash != "" {
		t.Fatalf("Publish set its input's hash to %q", in.Meta.Hash)
	}
	got, err := p.Load(ctx, "BFE1", 1)
	if err != nil || got.Meta.Hash != want {
		t.Fatalf("stored v1 hash %q, %v; want %s", got.Meta.Hash, err, want)
	}
	r, err = p.Publish(ctx, l, snap(60, 0), "same content, hash given")
	if err != nil || r.Outcome != Unchanged || r.Version != 1 || r.Hash != want {
		t.Fatalf("republish: %+v, %v; want Unchanged v1 %s", r, err, want)
	}
}
