package validate

import (
	"github.com/sluicelb/sluice/api/snapshot"
)

// Checked is a snapshot that passed every rule of Snapshot. Only Check
// makes one, so a function that takes a Checked (server.Apply, balance.Build)
// cannot be handed an unchecked snapshot. The zero Checked holds nothing;
// its Snapshot is nil. Whoever holds a Checked must not modify the snapshot.
type Checked struct{ s *snapshot.Snapshot }

// Snapshot returns the checked snapshot (nil for the zero Checked).
func (c Checked) Snapshot() *snapshot.Snapshot { return c.s }

// Check validates s as Snapshot does and, when it passes, returns it as a
// Checked. On error the Checked is the zero value.
func Check(s *snapshot.Snapshot) (Checked, error) {
	if err := Snapshot(s); err != nil {
		return Checked{}, err
	}
	return Checked{s}, nil
}

// Snapshot checks a snapshot before it is published or applied. It returns
// nil or Errors, every broken rule at once, sorted by path. Code that goes
// on to apply the snapshot calls Check instead.
func Snapshot(s *snapshot.Snapshot) error {
	var c collector
	if s == nil {
		c.add("", "snapshot is missing")
		return c.err()
	}
	c.name("meta.proxy_cluster", "proxy cluster", s.Meta.ProxyCluster)
	if s.Meta.Version < 1 {
		c.add("meta.version", "0 is less than 1")
	}
	if s.Meta.Parent >= s.Meta.Version && s.Meta.Parent != 0 {
		c.add("meta.parent", "%d is not older than version %d", s.Meta.Parent, s.Meta.Version)
	}
	if h := snapshot.ContentHash(s); s.Meta.Hash != h {
		if s.Meta.Hash == "" {
			c.add("meta.hash", "is empty; want the content hash %s", h)
		} else {
			c.add("meta.hash", "%q does not match the content hash %s", s.Meta.Hash, h)
		}
	}
	if s.Settings.IDC != "" {
		c.name("settings.idc", "IDC", s.Settings.IDC)
	}
	c.trustedProxies("settings.trusted_proxies", s.Settings.TrustedProxies)

	for _, name := range sortedKeys(s.Clusters) {
		cl := s.Clusters[name]
		path := "clusters." + name
		c.name(path, "cluster", name)
		c.subClusters(path+".subclusters", cl.SubClusters, nil)
		c.policy(path+".policy", cl.Policy)
		if d := cl.Row.Denominator; d != 100 && d != 10000 {
			c.add(path+".row.denominator", "%d is neither 100 nor 10000", d)
			continue
		}
		c.row(path+".row.weights", cl.Row.Weights, cl.Row.Denominator, cl.Row.AllowFullDrop,
			func(n string) bool { _, ok := cl.SubClusters[n]; return ok }, nil)
	}
	c.products("products", s.Products, s.DefaultProduct, func(cluster string) bool {
		_, ok := s.Clusters[cluster]
		return ok
	})
	return c.err()
}
