package validate

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
)

// missionSnapshot is what a scheduler would publish to BFE1 for the mission.
func missionSnapshot(t testing.TB) *snapshot.Snapshot {
	st := loadMission(t)
	s := &snapshot.Snapshot{
		Meta:           snapshot.Meta{ProxyCluster: "BFE1", Version: 7, Parent: 6, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		Settings:       snapshot.Settings{IDC: "IDC1", TrustedProxies: []string{"10.0.0.0/8"}},
		Products:       st.Products,
		DefaultProduct: st.DefaultProduct,
		Clusters:       map[string]snapshot.Cluster{},
	}
	for name, cl := range st.Clusters {
		row := snapshot.Row{Denominator: 100, Weights: map[string]int{"SC1": 50, "SC2": 50}}
		if name == "demo-main" {
			row = snapshot.Row{Denominator: 100, Weights: st.Pins[0].Weights, Pinned: true}
		}
		s.Clusters[name] = snapshot.Cluster{SubClusters: cl.SubClusters, Policy: cl.Policy, Row: row}
	}
	s.Meta.Hash = snapshot.ContentHash(s)
	return s
}

func TestSnapshotValid(t *testing.T) {
	if err := Snapshot(missionSnapshot(t)); err != nil {
		t.Fatalf("mission snapshot is invalid:\n%v", err)
	}
}

func TestSnapshotRules(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *snapshot.Snapshot)
		rehash bool
		want   []string
	}{
		{"hash mismatch", func(s *snapshot.Snapshot) {
			s.Clusters["demo-post"].SubClusters["SC1"].Instances[0].Weight = 9
		}, false, []string{`meta.hash: "` + "HASH" + `" does not match the content hash NEW`}},
		{"meta", func(s *snapshot.Snapshot) {
			s.Meta.Version, s.Meta.Parent, s.Meta.ProxyCluster = 0, 3, "bad name"
			s.Settings.TrustedProxies = []string{"nope"}
			s.Settings.IDC = "x/y"
		}, true, []string{
			`meta.parent: 3 is not older than version 0`,
			`meta.proxy_cluster: proxy cluster name "bad name" has ' ' at 3; want 1..128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit`,
			`meta.version: 0 is less than 1`,
			`settings.idc: IDC name "x/y" has '/' at 1; want 1..128 characters of A-Z a-z 0-9 . _ -, starting with a letter or digit`,
			`settings.trusted_proxies[0]: "nope" is not a CIDR like 10.0.0.0/8 or fd00::/8`,
		}},
		{"first version", func(s *snapshot.Snapshot) {
			s.Meta.Version, s.Meta.Parent = 1, 0
		}, true, nil},
		{"parent equal to version", func(s *snapshot.Snapshot) {
			s.Meta.Version, s.Meta.Parent = 3, 3
		}, true, []string{`meta.parent: 3 is not older than version 3`}},
		{"rows", func(s *snapshot.Snapshot) {
			cl := s.Clusters["demo-main"]
			cl.Row = snapshot.Row{Denominator: 10000, Weights: map[string]int{"SC1": 4500, "SC2": 4500, "SC7": 1}}
			s.Clusters["demo-main"] = cl
			cl = s.Clusters["demo-post"]
			cl.Row = snapshot.Row{Denominator: 1000, Weights: map[string]int{"SC1": 1000}}
			s.Clusters["demo-post"] = cl
			cl = s.Clusters["demo-static"]
			cl.Row = snapshot.Row{Denominator: 100, Weights: map[string]int{config.Blackhole: 100}}
			s.Clusters["demo-static"] = cl
		}, true, []string{
			`clusters.demo-main.row.weights: weights sum to 9001, want exactly 10000`,
			`clusters.demo-main.row.weights.SC7: sub-cluster "SC7" does not exist in the cluster`,
			`clusters.demo-post.row.denominator: 1000 is neither 100 nor 10000`,
			`clusters.demo-static.row.weights.GSLB_BLACKHOLE: 100 drops all traffic; set allow_full_drop to allow it`,
		}},
		{"full drop allowed", func(s *snapshot.Snapshot) {
			cl := s.Clusters["demo-static"]
			cl.Row = snapshot.Row{Denominator: 100, Weights: map[string]int{config.Blackhole: 100}, AllowFullDrop: true}
			s.Clusters["demo-static"] = cl
		}, true, nil},
		{"empty row", func(s *snapshot.Snapshot) {
			cl := s.Clusters["demo-static"]
			cl.Row = snapshot.Row{Denominator: 100}
			s.Clusters["demo-static"] = cl
		}, true, []string{`clusters.demo-static.row.weights: is empty; want weights over the sub-clusters (and GSLB_BLACKHOLE) summing to 100`}},
		{"rule to a missing cluster", func(s *snapshot.Snapshot) {
			delete(s.Clusters, "demo-post")
		}, true, []string{`products.demo.rules[1].cluster: cluster "demo-post" does not exist`}},
		{"bad cond and instance", func(s *snapshot.Snapshot) {
			s.Products["demo"].Rules[2].Cond = `default_t() ||`
			s.Clusters["demo-main"].SubClusters["SC1"].Instances[2].Port = 70000
		}, true, []string{
			`clusters.demo-main.subclusters.SC1.instances[2].port: 70000 is outside 1..65535`,
			`products.demo.rules[2].cond: column 15: unexpected end of condition; want a primitive, "!" or "("`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := missionSnapshot(t)
			old := s.Meta.Hash
			tt.mutate(s)
			if tt.rehash {
				s.Meta.Hash = snapshot.ContentHash(s)
			}
			err := Snapshot(s)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Snapshot() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Snapshot() = nil")
			}
			want := strings.Join(tt.want, "\n")
			want = strings.ReplaceAll(want, "HASH", old)
			want = strings.ReplaceAll(want, "NEW", snapshot.ContentHash(s))
			if err.Error() != want {
				t.Errorf("errors:\n%s\nwant:\n%s", err, want)
			}
		})
	}
}
