package server

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicelb/sluice/api/config"
	"github.com/sluicelb/sluice/api/snapshot"
	"github.com/sluicelb/sluice/testkit/poll"
)

// aheadClock is the real clock plus an offset that only grows: the
// proxy's deadlines (start + timeout) only move later, never into the past.
type aheadClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *aheadClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *aheadClock) Add(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// sluice_proxy_request_duration_seconds: series by cluster, sub-cluster of
// the last attempt and status class, each routed request observed once
// with its duration — from the head read to the end of the answer. The backend moves the proxy's clock
// by 35 s for one request and not at all for the other, so the buckets the
// two land in are known whatever the machine's own delays (under 10 s).
func TestRequestDurationHistogram(t *testing.T) {
	clk := &aheadClock{}
	b := newBackend(t, "b1", func(w http.ResponseWriter, r *http.Request) {
		d, _ := time.ParseDuration(r.URL.Query().Get("take"))
		clk.Add(d)
		w.WriteHeader(200)
	})
	reg := prometheus.NewRegistry()
	snap := testSnapshot(3, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil))
	p := newProxy(t, snap, proxyOpts{opts: Options{Metrics: reg, Now: clk.Now}})
	c := client(t)
	for _, take := range []string{"35s", "0s"} {
		if resp, _ := get(t, c, p.url+"/?take="+take, map[string]string{"Host": "demo.test"}); resp.StatusCode != 200 {
			t.Fatalf("take=%s: status %d", take, resp.StatusCode)
		}
	}
	// A request's end is observed after the client has the answer: poll.
	var h *dto.Histogram
	poll.EventuallyTrue(t, 10*time.Second, "both requests observed", func() bool {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "sluice_proxy_request_duration_seconds" {
				continue
			}
			h = nil
			for _, m := range mf.Metric {
				l := map[string]string{}
				for _, lp := range m.Label {
					l[lp.GetName()] = lp.GetValue()
				}
				if len(l) != 3 || l["cluster"] != "main" {
					t.Fatalf("series labelled %v: want cluster=main, subcluster and class", l)
				}
				if l["subcluster"] == "SC1" && l["class"] == "2xx" {
					h = m.Histogram
				} else if n := m.Histogram.GetSampleCount(); n != 0 {
					t.Fatalf("series %v has %d samples, want 0 (both answers were SC1's 200s)", l, n)
				}
			}
		}
		return h != nil && h.GetSampleCount() == 2
	})
	if len(h.Bucket) != len(DurationBuckets) {
		t.Fatalf("%d buckets, want %d", len(h.Bucket), len(DurationBuckets))
	}
	for i, bk := range h.Bucket {
		want := uint64(0)
		switch le := bk.GetUpperBound(); {
		case le != DurationBuckets[i]:
			t.Fatalf("bucket %d: le %v, want %v", i, le, DurationBuckets[i])
		case le >= 60:
			want = 2
		case le >= 10:
			want = 1
		}
		// The quick request is in some bucket up to 10 s; only "le ≥ 10" is certain.
		if got := bk.GetCumulativeCount(); (bk.GetUpperBound() >= 10 && got != want) || got > 1 && bk.GetUpperBound() < 60 {
			t.Errorf("bucket le=%v: %d, want %d", bk.GetUpperBound(), got, want)
		}
	}
	if sum := h.GetSampleSum(); sum < 35 || sum >= 55 {
		t.Errorf("sum %.3f s, want 35 s plus the real time of two requests", sum)
	}
	// The cluster leaves the table: its series go with it.
	next := testSnapshot(4, testCluster(map[string][]config.Instance{"SC1": {inst(b.addr, 1)}}, map[string]int{"SC1": 100}, nil))
	next.Clusters = map[string]snapshot.Cluster{"other": next.Clusters["main"]}
	next.Products["demo"].Rules[0].Cluster = "other"
	next.Meta.Hash = snapshotHash(next)
	if err := p.s.Apply(checked(t, next)); err != nil {
		t.Fatal(err)
	}
	// other's series: SC1 and GSLB_BLACKHOLE, 6 classes each.
	if n := testutil.CollectAndCount(p.s.metrics.duration); n != 12 || p.s.metrics.duration.DeletePartialMatch(prometheus.Labels{"cluster": "other"}) != 12 {
		t.Fatalf("%d duration series after main left the table, want other's 12", n)
	}
}

// BenchmarkRequestDurationObserve is the histogram's cost on the request
// path: one clock read and one Observe on the cluster's pre-resolved series
// (BenchmarkServeHTTP includes it too).
func BenchmarkRequestDurationObserve(b *testing.B) {
	m := newMetrics(nil)
	o := m.duration.WithLabelValues("main", "SC1", "2xx")
	start := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o.Observe(time.Since(start).Seconds())
		}
	})
}
