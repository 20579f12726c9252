package snapshot

import (
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
)

func hashState(t *testing.T) *Snapshot {
	t.Helper()
	s, err := FromState(testState(), "BFE1", Meta{Version: 3, Author: "a", Reason: "r", CreatedAt: time.Unix(100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clone deep-copies s through JSON, so maps are rebuilt (and iterated in
// another order) while the content stays equal.
func clone(t *testing.T, s *Snapshot) *Snapshot {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func TestContentHashEqualContentEqualHash(t *testing.T) {
	a := hashState(t)
	want := ContentHash(a)
	if len(want) != 64 {
		t.Fatalf("hash %q is not hex SHA-256", want)
	}
	for i := range 20 {
		if got := ContentHash(clone(t, a)); got != want {
			t.Fatalf("copy %d: hash %s, want %s", i, got, want)
		}
	}
	// Metadata (but the proxy cluster) and explanations are not content.
	b := clone(t, a)
	b.Meta = Meta{ProxyCluster: "BFE1", Version: 99, Parent: 98, Author: "x", Reason: "y", CreatedAt: time.Unix(5, 0), Hash: "z"}
	c := b.Clusters["main"]
	c.Explanation = &Explanation{Mode: "optimal", Notes: []string{"n"}}
	b.Clusters["main"] = c
	if got := ContentHash(b); got != want {
		t.Fatalf("metadata/explanation changed the hash: %s, want %s", got, want)
	}
}

func TestContentHashSeesEveryContentChange(t *testing.T) {
	base := hashState(t)
	want := ContentHash(base)
	cases := map[string]func(s *Snapshot){
		"proxy cluster": func(s *Snapshot) { s.Meta.ProxyCluster = "BFE2" },
		"settings":      func(s *Snapshot) { s.Settings.IDC = "IDC9" },
		"trusted":       func(s *Snapshot) { s.Settings.TrustedProxies = nil },
		"default":       func(s *Snapshot) { s.DefaultProduct = "" },
		"products": func(s *Snapshot) {
			p := s.Products["demo"]
			p.Hosts = []string{"other.local"}
			s.Products["demo"] = p
		},
		"row weight": func(s *Snapshot) {
			c := s.Clusters["thirds"]
			c.Row.Weights["A"]--
			c.Row.Weights["B"]++
		},
		"row flag": func(s *Snapshot) {
			c := s.Clusters["thirds"]
			c.Row.AllowFullDrop = true
			s.Clusters["thirds"] = c
		},
		"instance": func(s *Snapshot) {
			sc := s.Clusters["main"].SubClusters["SC1"]
			sc.Instances[0].Port++
		},
		"policy": func(s *Snapshot) {
			c := s.Clusters["main"]
			c.Policy.Blackhole.MaxPercent++
			s.Clusters["main"] = c
		},
		"cluster renamed": func(s *Snapshot) {
			s.Clusters["main2"] = s.Clusters["main"]
			delete(s.Clusters, "main")
		},
		"cluster removed": func(s *Snapshot) { delete(s.Clusters, "gone") },
		"no clusters":     func(s *Snapshot) { s.Clusters = nil },
	}
	seen := map[string]string{want: "base"}
	for name, change := range cases {
		s := clone(t, base)
		change(s)
		got := ContentHash(s)
		if other, dup := seen[got]; dup {
			t.Fatalf("%s: hash %s equals the hash of %s", name, got, other)
		}
		seen[got] = name
	}
}

func TestContentHashFromMatchesContentHash(t *testing.T) {
	s := hashState(t)
	names := []string{"agents", "drained", "gone", "main", "thirds"}
	sums := make([][sha256.Size]byte, len(names))
	for i, n := range names {
		c := s.Clusters[n]
		sums[i] = ClusterHash(&c)
	}
	routes := RoutesHash(s.Products, s.DefaultProduct)
	if got, want := ContentHashFrom(s, routes, names, sums), ContentHash(s); got != want {
		t.Fatalf("ContentHashFrom %s, ContentHash %s", got, want)
	}
	// A wrong part gives another hash.
	sums[0][0] ^= 1
	if ContentHashFrom(s, routes, names, sums) == ContentHash(s) {
		t.Fatal("a changed cluster sum kept the hash")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("mismatched names and sums did not panic")
		}
	}()
	ContentHashFrom(s, routes, names, sums[:1])
}

func TestClusterHashIgnoresExplanationOnly(t *testing.T) {
	c := Cluster{
		SubClusters: map[string]config.SubCluster{"A": {IDC: "IDC1", Instances: inst(1, 2)}},
		Policy:      config.DefaultPolicy(),
		Row:         Row{Denominator: 100, Weights: map[string]int{"A": 100}},
	}
	want := ClusterHash(&c)
	c.Explanation = &Explanation{Mode: "pinned"}
	if got := ClusterHash(&c); got != want {
		t.Fatal("explanation changed the cluster hash")
	}
	if c.Explanation == nil {
		t.Fatal("ClusterHash modified its argument")
	}
	c.Row.Weights = map[string]int{"A": 99, config.Blackhole: 1}
	if ClusterHash(&c) == want {
		t.Fatal("a row change kept the cluster hash")
	}
}
