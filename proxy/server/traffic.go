package server

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicelb/sluice/api/report"
)

// trafficStats are the cumulative per-cluster counters behind the traffic
// report (report.Traffic): answers by sub-cluster of the last attempt
// (GSLB_BLACKHOLE included), by status class, proxy-generated errors, and a
// fixed-bucket latency histogram. They survive table swaps like clusterStats;
// the request path only does atomic adds on pointers resolved at Apply.
type trafficStats struct {
	subs      sync.Map // sub-cluster name → *atomic.Uint64
	codes     [6]atomic.Uint64
	generated atomic.Uint64
	latency   [report.LatencyBuckets]atomic.Uint64
}

// sub is the answer counter of one sub-cluster, created on first use.
func (t *trafficStats) sub(name string) *atomic.Uint64 {
	if v, ok := t.subs.Load(name); ok {
		return v.(*atomic.Uint64)
	}
	v, _ := t.subs.LoadOrStore(name, new(atomic.Uint64))
	return v.(*atomic.Uint64)
}

// record counts one answered request. sub is nil when no sub-cluster was
// picked (the answer was generated before).
func (t *trafficStats) record(sub *atomic.Uint64, status int, generated bool, took time.Duration) {
	if sub != nil {
		sub.Add(1)
	}
	t.codes[codeIndex(status)].Add(1)
	if generated {
		t.generated.Add(1)
	}
	t.latency[report.LatencyBucket(took)].Add(1)
}

// snapshot copies the counters of the sub-clusters in subs.
func (t *trafficStats) snapshot(subs map[string]*subMetrics) report.TrafficCounts {
	out := report.TrafficCounts{SubClusters: make(map[string]uint64, len(subs))}
	for name := range subs {
		out.SubClusters[name] = t.sub(name).Load()
	}
	for i := range t.codes {
		out.Codes[i] = t.codes[i].Load()
	}
	out.Generated = t.generated.Load()
	for i := range t.latency {
		out.Latency[i] = t.latency[i].Load()
	}
	return out
}
