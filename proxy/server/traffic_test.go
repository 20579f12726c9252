package server

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/report"
	"github.com/sluicelb/sluice/testkit/poll"
)

// The traffic counters count every answer once: by the sub-cluster that
// answered (GSLB_BLACKHOLE for drops), by status class and by latency bucket.
func TestTrafficCountsBySubClusterAndStatus(t *testing.T) {
	ok := newBackend(t, "ok", nil)
	missing := newBackend(t, "missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{
		"SC1": {inst(ok.addr, 1)}, "SC2": {inst(missing.addr, 1)},
	}, map[string]int{"SC1": 50, "SC2": 20, config.Blackhole: 30}, nil))
	p := newProxy(t, snap, proxyOpts{opts: Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	c := client(t)
	const n = 600
	var dropped uint64
	for i := 0; i < n; i++ {
		res, _ := get(t, c, p.url+"/", map[string]string{"X-Forwarded-For": fmt.Sprintf("10.%d.%d.%d", i%7, i/250, i%250)})
		if res.StatusCode == http.StatusServiceUnavailable {
			dropped++
		}
	}
	// finish runs after the client has its answer: poll for the last one.
	var tc report.TrafficCounts
	poll.EventuallyTrue(t, 10*time.Second, "every answer counted", func() bool {
		tc = p.s.Counts()["main"].Traffic
		return tc.Codes[2]+tc.Codes[4]+tc.Codes[5] == n
	})
	sc1, sc2 := uint64(ok.hits.Load()), uint64(missing.hits.Load())
	if tc.SubClusters["SC1"] != sc1 || tc.SubClusters["SC2"] != sc2 || tc.SubClusters[config.Blackhole] != dropped {
		t.Fatalf("sub-cluster counts %v, want SC1=%d SC2=%d %s=%d", tc.SubClusters, sc1, sc2, config.Blackhole, dropped)
	}
	if sc1 == 0 || sc2 == 0 || dropped == 0 {
		t.Fatalf("the row was not exercised: SC1=%d SC2=%d dropped=%d", sc1, sc2, dropped)
	}
	if tc.Codes[2] != sc1 || tc.Codes[4] != sc2 || tc.Codes[5] != dropped || tc.Generated != 0 {
		t.Fatalf("status classes %v generated %d, want 2xx=%d 4xx=%d 5xx=%d (drops) generated 0", tc.Codes, tc.Generated, sc1, sc2, dropped)
	}
	var lat uint64
	for _, x := range tc.Latency {
		lat += x
	}
	if lat != n {
		t.Fatalf("latency histogram holds %d answers, want %d", lat, n)
	}
}

// An answer the proxy generates (no backend reachable) is a generated error,
// and counts in the 5xx class.
func TestTrafficCountsGeneratedErrors(t *testing.T) {
	snap := testSnapshot(1, testCluster(map[string][]config.Instance{"SC1": {inst(deadAddr(t), 1)}},
		map[string]int{"SC1": 100}, func(p *config.Policy) { p.Retry.RetryMax, p.Retry.CrossRetry = 0, 0 }))
	p := newProxy(t, snap, proxyOpts{})
	c := client(t)
	const n = 5
	for i := 0; i < n; i++ {
		if res, _ := get(t, c, p.url+"/", nil); res.StatusCode < 500 {
			t.Fatalf("status %d from a dead backend", res.StatusCode)
		}
	}
	poll.EventuallyTrue(t, 10*time.Second, "generated errors counted", func() bool {
		tc := p.s.Counts()["main"].Traffic
		return tc.Generated == n && tc.Codes[5] == n && tc.SubClusters["SC1"] == n
	})
}

// Counters survive a table swap: a new version does not restart them.
func TestTrafficCountsSurviveApply(t *testing.T) {
	b := newBackend(t, "b", nil)
	cl := testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil)
	p := newProxy(t, testSnapshot(1, cl), proxyOpts{})
	c := client(t)
	get(t, c, p.url+"/", nil)
	poll.EventuallyTrue(t, 10*time.Second, "first answer counted", func() bool { return p.s.Counts()["main"].Traffic.Codes[2] == 1 })
	if err := p.s.Apply(checked(t, testSnapshot(2, cl))); err != nil {
		t.Fatal(err)
	}
	get(t, c, p.url+"/", nil)
	poll.EventuallyTrue(t, 10*time.Second, "second answer counted on top", func() bool {
		tc := p.s.Counts()["main"].Traffic
		return tc.Codes[2] == 2 && tc.SubClusters["SC1"] == 2
	})
}
