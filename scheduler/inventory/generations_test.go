package inventory

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/etcdtest"
	"github.com/sluicelb/sluice/testkit/poll"
)

// TestGenerations: each input change gives exactly the clusters it touches
// a new generation, and a repeated identical value none.
func TestGenerations(t *testing.T) {
	_, cli := etcdtest.New(t)
	inv := start(t, cli, &clock{t: time.Unix(1000, 0)})
	two := strings.Replace(desired, `}}},
  "scheduler"`, `}},
  "other": {"subclusters": {"A": {"idc": "IDC1", "instances": [{"addr": "10.0.0.9", "port": 80, "weight": 1}]}}}},
  "scheduler"`, 1)
	rev := put(t, cli, layout.Desired(), two)
	poll.EventuallyTrue(t, 10*time.Second, "state", func() bool { v := inv.View(); return v.StateRevision == rev && v.Synced })
	g0 := inv.View().Generations
	if g0["demo-main"] == 0 || g0["other"] == 0 || g0["demo-main"] == g0["other"] {
		t.Fatalf("initial generations %v", g0)
	}
	// changed lets the inventory apply a marker written after the change
	// (so a change that should not move anything had its chance), then
	// returns the clusters whose generation moved.
	marker := 0
	changed := func(before map[string]uint64) []string {
		t.Helper()
		marker++
		id := "m" + strings.Repeat("x", marker)
		put(t, cli, layout.ShiftsPrefix()+id, `{"id":"`+id+`","state":"pending"}`)
		poll.EventuallyTrue(t, 10*time.Second, "marker", func() bool { _, ok := inv.View().Shifts[id]; return ok })
		var out []string
		for c, g := range inv.View().Generations {
			if g != before[c] {
				out = append(out, c)
			}
		}
		return out
	}
	demandKey, _ := layout.Demand("BFE1", "p1")
	demand := func(rps float64) string {
		b, _ := json.Marshal(report.Demand{ProxyCluster: "BFE1", ID: "p1", Clusters: map[string]report.ClusterDemand{"other": {RPS: rps}}})
		return string(b)
	}
	steps := []struct {
		what string
		do   func()
		want string
	}{
		{"agent registers in demo-main", func() { put(t, cli, instKey(t, "demo-main", "SC2", "127.0.0.1:8002"), instJSON(t, "healthy", 2)) }, "demo-main"},
		{"same registration again", func() { put(t, cli, instKey(t, "demo-main", "SC2", "127.0.0.1:8002"), instJSON(t, "healthy", 2)) }, ""},
		{"demand for other", func() { put(t, cli, demandKey, demand(10)) }, "other"},
		{"same demand again", func() { put(t, cli, demandKey, demand(10)) }, ""},
		{"pin on other", func() {
			put(t, cli, layout.Desired(), strings.Replace(two, `"scheduler"`, `"pins": [{"proxy_cluster": "BFE1", "cluster": "other", "weights": {"A": 100}}], "scheduler"`, 1))
		}, "other"},
		{"demand report deleted", func() {
			if _, err := cli.Delete(t.Context(), demandKey); err != nil {
				t.Fatal(err)
			}
		}, "other"},
	}
	for _, s := range steps {
		before := inv.View().Generations
		s.do()
		if s.want != "" {
			// The watches are independent: wait for this input's event.
			poll.EventuallyTrue(t, 10*time.Second, s.what, func() bool { return inv.View().Generations[s.want] != before[s.want] })
		}
		if got := strings.Join(changed(before), ","); got != s.want {
			t.Fatalf("%s: generations moved for %q, want %q", s.what, got, s.want)
		}
	}
}
