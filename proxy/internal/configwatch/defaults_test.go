package configwatch

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/api/validate"
)

// TestNewFillsDefaults: zero durations in Config mean the defaults, and a
// nil Rand a seeded one.
func TestNewFillsDefaults(t *testing.T) {
	w, err := New(Config{Client: &clientv3.Client{}, ProxyCluster: pc, Layout: layout, Apply: func(validate.Checked) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if w.cfg.StallTimeout != DefaultStallTimeout || w.cfg.OpTimeout != DefaultOpTimeout || w.cfg.StoreCheckInterval != DefaultStoreCheckInterval || w.rnd == nil {
		t.Fatalf("stall %v, op %v, store check %v, rand %v; want %v, %v, %v, a source", w.cfg.StallTimeout, w.cfg.OpTimeout, w.cfg.StoreCheckInterval,
			w.rnd, DefaultStallTimeout, DefaultOpTimeout, DefaultStoreCheckInterval)
	}
}

// TestApplyRefusesOlderVersion: apply itself refuses a snapshot older than
// the applied one of the same lineage (I1's last line: handlePointer never
// hands it one), and takes the applied version's successor.
func TestApplyRefusesOlderVersion(t *testing.T) {
	rec := newRecorder()
	w, err := New(Config{Client: &clientv3.Client{}, ProxyCluster: pc, Layout: layout, Apply: rec.apply, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	check := func(v uint64) validate.Checked {
		t.Helper()
		s := testSnapshot(v)
		s.Meta.Hash = snapshot.ContentHash(s)
		c, err := validate.Check(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if err := w.apply(check(2), SourceEtcd); err != nil {
		t.Fatalf("apply v2: %v", err)
	}
	if err := w.apply(check(1), SourceEtcd); err == nil || err.Error() != "snapshot "+check(1).Snapshot().Meta.ID()+" is older than applied v2" {
		t.Fatalf("apply v1 after v2: %v, want refused as older", err)
	}
	if err := w.apply(check(3), SourceEtcd); err != nil {
		t.Fatalf("apply v3: %v", err)
	}
	if got := rec.versions(); !equal(got, []uint64{2, 3}) {
		t.Fatalf("applied %v, want [2 3]", got)
	}
}
