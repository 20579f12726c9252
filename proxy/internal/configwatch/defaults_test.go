package configwatch

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

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
